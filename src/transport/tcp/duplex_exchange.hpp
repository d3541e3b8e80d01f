#pragma once

// The send-while-receiving loop that every TCP link between workers runs:
// one socket to send on, one to receive from (the same socket or another),
// both non-blocking, moved in turns until both sides are done, so that two
// workers that send to each other never wait on each other with full socket
// buffers. The ring (ring_links.hpp: it sends to the next worker and
// receives from the previous one) and the mesh (mesh_links.hpp: any worker
// to any worker) both exchange through it. No CAF: tested under
// ThreadSanitizer.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/spin_wait.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/socket_io.hpp"

namespace lockstep::detail {

/// What a frame's read took from a connection beyond the frame's end, from
/// `at` on: every later receive from that connection takes these bytes
/// first.
struct read_ahead {
  bytes data;
  std::size_t at = 0;
};

/// How an exchange polls before it sleeps in poll(2): spin_on_this_host,
/// looked up again at most every 10 ms. For one thread at a time (the
/// link's).
class spin_budget_cache {
public:
  host_spin get();

private:
  host_spin spin_;
  io_clock::time_point checked_{};
};

/// The two ends of one exchange: the socket it sends on and the cluster's
/// number of the worker at its other end; the socket it receives from, its
/// worker and what earlier frames' reads took ahead on it. A side that
/// moves no bytes may have no socket (null).
struct duplex_ends {
  tcp_socket* send = nullptr;
  std::size_t send_worker = 0;
  tcp_socket* receive = nullptr;
  std::size_t receive_worker = 0;
  read_ahead* ahead = nullptr; // with `receive`
};

/// Sends `out` on `ends.send` while it receives `in.size()` bytes from
/// `ends.receive`, until both are done. When neither can move, it polls
/// without sleeping for up to `spin` (a woken thread takes tens of
/// microseconds to run), then sleeps in poll(2). Throws connection_closed
/// naming the worker whose connection closed, link_deadline_passed naming
/// the worker it waited for when the deadline passes first.
void duplex_exchange(const duplex_ends& ends, std::span<const std::uint8_t> out,
                     std::span<std::uint8_t> in, host_spin spin,
                     io_clock::time_point deadline);

/// duplex_exchange() for frames: 8 bytes of little-endian length, then that
/// many bytes. Sends the frame `out` while it receives the next frame from
/// `ends.receive` into `in`, resized to it, in one pass. Its reads reach as
/// far as `out` does (the frames of one collective are as long as each
/// other, so one read takes a whole frame); bytes beyond the frame's end,
/// the start of what comes next, are kept in `*ends.ahead`. Throws as
/// duplex_exchange(), and connection_closed for a frame of more than
/// `max_bytes`, which no worker sends.
void duplex_exchange_frame(const duplex_ends& ends, std::span<const std::uint8_t> out, bytes& in,
                           std::size_t max_bytes, host_spin spin,
                           io_clock::time_point deadline);

} // namespace lockstep::detail

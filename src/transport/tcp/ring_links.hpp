#pragma once

// The connections of one worker in a ring of workers: one to the next rank
// (it only sends there) and one from the previous rank (it only receives
// from there), both authenticated (authenticate.hpp). exchange() moves a
// send and a receive at once, so no two neighbours ever wait on each other
// with full socket buffers. tcp_link (tcp_link.hpp) puts it behind the
// link interface that the ring's algorithm (collectives/ring_collectives.hpp)
// is written against. The moving of bytes is duplex_exchange.hpp's, which
// the mesh of workers (mesh_links.hpp) shares. No CAF: tested under
// ThreadSanitizer.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "transport/tcp/connect_watch.hpp"
#include "transport/tcp/duplex_exchange.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/socket_io.hpp"

#include "lockstep/error.hpp"

namespace lockstep::detail {

struct ring_links {
  std::size_t rank = 0;
  std::size_t world = 1;
  tcp_socket next; // to rank + 1 (mod world)
  tcp_socket prev; // from rank - 1 (mod world)

  std::size_t next_rank() const { return (rank + 1) % world; }
  std::size_t prev_rank() const { return (rank + world - 1) % world; }

  /// The cluster's number of the worker at ring position `position`: the
  /// position itself in the ring of all workers; `workers[position]` in a
  /// ring of some of them (the leaders of hosts), which the handshakes
  /// check and the errors name.
  std::size_t worker_of(std::size_t position) const {
    return position < workers.size() ? workers[position] : position;
  }
  std::size_t next_worker() const { return worker_of(next_rank()); }
  std::size_t prev_worker() const { return worker_of(prev_rank()); }

  /// Sends `out` to the next rank while it receives `in` from the previous
  /// one, until both are done (duplex_exchange). When neither can move, it
  /// retries for up to
  /// runtime_options::spin_wait while this host's runnable threads fit on
  /// its CPUs (a woken thread takes tens of microseconds to run), else it
  /// sleeps in poll(2) at once. Throws connection_closed naming the
  /// neighbour whose connection closed, link_deadline_passed naming the
  /// neighbour it waited for when the deadline passes first.
  void exchange(std::span<const std::uint8_t> out, std::span<std::uint8_t> in,
                io_clock::time_point deadline);

  /// exchange() for frames: 8 bytes of little-endian length, then that
  /// many bytes. Sends the frame `out` (one this rank wrote, or one it
  /// received and passes on) while it receives the previous rank's next
  /// frame into `in`, resized to it, in one pass, so a frame costs one
  /// hop. Its reads reach as far as `out` does (the frames of one
  /// collective are as long as each other, so one read takes a whole
  /// frame); bytes beyond the frame's end, the start of what comes next,
  /// are kept in `ahead` for the next receive. Throws as exchange(), and
  /// connection_closed for a frame of more than `max_bytes`, which no
  /// worker sends.
  void exchange_frame(std::span<const std::uint8_t> out, bytes& in, std::size_t max_bytes,
                      io_clock::time_point deadline);

  /// Closes both connections, so that the neighbours' exchanges fail at
  /// once instead of at their deadlines.
  void close() noexcept;
  /// Shuts both connections down (shutdown(2)) without touching the socket
  /// objects, so another thread may call it while one exchanges: the
  /// exchange and the neighbours' fail at once.
  void shut_down() noexcept;

  /// How long exchange() may spin (the struct stays an aggregate of the
  /// four fields above, the state after them starting empty).
  spin_budget_cache spin;

  /// What a frame's read took from the previous rank beyond the frame's
  /// end: every receive takes these bytes first.
  read_ahead ahead;

  /// By ring position: the worker's number in the cluster (worker_of);
  /// empty in the ring of all workers.
  std::vector<std::size_t> workers;
};

/// Connects `links` (rank, world and two unconnected sockets on one
/// io_context) into the ring, in the calling thread and no other: dials
/// `next_address` (retrying until the deadline, since the next worker may
/// not listen yet) and authenticates as its client, and accepts one
/// connection on `acceptor` and authenticates it as the server, refusing
/// any but the previous rank. The two sides take turns, each step
/// waiting only for what the neighbours' earlier steps send (the client's
/// hello, the server's challenge, the client's response, the server's
/// acceptance), so a ring of any size connects without waiting on itself.
/// Its hellos say that they open a ring connection (connection_purpose):
/// one for the mesh is refused, and the mesh's dialer tries again.
/// A connection to `acceptor` that fails the handshake (a stranger,
/// another rank) is dropped after at most handshake_timeout and the next
/// one awaited. Every wait also watches `watch`. Throws
/// authentication_error, timeout_error, connection_closed,
/// peer_lost_error when the next worker closes its connection in the
/// middle of the handshake (it passed the rendezvous with this token: it
/// left), and what `watch.ready` throws.
void connect_ring(ring_links& links, boost::asio::ip::tcp::acceptor& acceptor,
                  const boost::asio::ip::tcp::endpoint& next_address,
                  std::span<const std::uint8_t> token, const handshake_identity& self,
                  io_clock::time_point deadline, ring_watch watch = {});

} // namespace lockstep::detail

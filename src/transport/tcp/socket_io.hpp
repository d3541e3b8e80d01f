#pragma once

// Blocking reads and writes with a deadline on a TCP socket: the socket is
// put in non-blocking mode and each call waits in poll(2) for at most what
// is left until the deadline. For handshakes and control frames, where a
// peer that stops sending must not hold a thread forever.

#include <boost/asio/ip/tcp.hpp>

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string_view>

#include "transport/link.hpp"

namespace lockstep::detail {

using tcp_socket = boost::asio::ip::tcp::socket;
using io_clock = std::chrono::steady_clock;

/// The peer closed or reset the connection (or the socket failed); what()
/// says which. A link_closed, as a link reports a lost peer.
class connection_closed : public link_closed {
public:
  using link_closed::link_closed;
};

/// Waits in poll(2) until one of `fds` is ready (true) or `deadline`
/// passes (false), resuming after signals. Throws connection_closed when
/// poll itself fails.
bool poll_until(std::span<pollfd> fds, io_clock::time_point deadline);

/// What one non-blocking read or write on a connection with `peer` (for
/// messages, e.g. "worker 2") did: the bytes it moved, 0 when it would
/// have blocked. Throws connection_closed when the peer closed the
/// connection or it failed.
std::size_t moved_or_closed(std::size_t moved, const boost::system::error_code& error,
                            std::string_view peer);

/// One attempt to connect `socket` (opened afresh) to `address`, waiting
/// for the answer at most until `deadline` (a host that drops the SYN
/// would hold a blocking connect for minutes). Returns the reason it
/// failed (timed_out at the deadline), the socket closed; nothing on
/// success, the socket connected and in blocking mode.
boost::system::error_code connect_before(tcp_socket& socket,
                                         const boost::asio::ip::tcp::endpoint& address,
                                         io_clock::time_point deadline);

/// The growing pause between attempts to connect: 10 ms, doubled up to 1 s.
inline constexpr std::chrono::milliseconds first_dial_pause{10};
inline constexpr std::chrono::milliseconds longest_dial_pause{1000};

/// Reads exactly `buffer.size()` bytes. Throws connection_closed, or
/// lockstep::timeout_error when the deadline passes first.
void read_exact(tcp_socket& socket, std::span<std::uint8_t> buffer, io_clock::time_point deadline);

/// Writes the parts one after the other, in as few system calls as the
/// kernel takes (a gather write: a frame's header and payload leave in one
/// segment, so Nagle never holds a header back). Throws as read_exact.
void write_all(tcp_socket& socket, std::initializer_list<std::span<const std::uint8_t>> parts,
               io_clock::time_point deadline);

} // namespace lockstep::detail

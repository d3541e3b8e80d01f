#pragma once

// Blocking reads and writes with a deadline on a TCP socket: the socket is
// put in non-blocking mode and each call waits in poll(2) for at most what
// is left until the deadline. For handshakes and control frames, where a
// peer that stops sending must not hold a thread forever.

#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>

namespace lockstep::detail {

using tcp_socket = boost::asio::ip::tcp::socket;
using io_clock = std::chrono::steady_clock;

/// The peer closed or reset the connection (or the socket failed); what()
/// says which.
class connection_closed : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Reads exactly `buffer.size()` bytes. Throws connection_closed, or
/// lockstep::timeout_error when the deadline passes first.
void read_exact(tcp_socket& socket, std::span<std::uint8_t> buffer, io_clock::time_point deadline);

/// Writes the parts one after the other, in as few system calls as the
/// kernel takes (a gather write: a frame's header and payload leave in one
/// segment, so Nagle never holds a header back). Throws as read_exact.
void write_all(tcp_socket& socket, std::initializer_list<std::span<const std::uint8_t>> parts,
               io_clock::time_point deadline);

} // namespace lockstep::detail

#include "transport/tcp/socket_io.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace lockstep::detail {

namespace {

/// Waits until the socket is readable (or writable); false at the deadline.
bool wait_ready(tcp_socket& socket, short events, io_clock::time_point deadline) {
  pollfd entry{socket.native_handle(), events, 0};
  return poll_until({&entry, 1}, deadline);
}

[[noreturn]] void late(const char* what) {
  throw timeout_error(std::string("the peer did not ") + what + " before the deadline");
}

} // namespace

bool poll_until(std::span<pollfd> fds, io_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - io_clock::now());
    if (left.count() <= 0)
      return false;
    const auto ready = ::poll(fds.data(), fds.size(),
                              static_cast<int>(std::min<long long>(left.count(), 1 << 30)));
    if (ready > 0)
      return true; // readable, writable, or an error the next call reports
    if (ready < 0 && errno != EINTR)
      throw connection_closed(std::string("poll failed: ") + std::strerror(errno));
  }
}

std::size_t moved_or_closed(std::size_t moved, const boost::system::error_code& error,
                            std::string_view peer) {
  if (error == boost::asio::error::would_block)
    return 0;
  if (error == boost::asio::error::eof)
    throw connection_closed(std::string(peer) + " closed its connection");
  if (error)
    throw connection_closed("the connection with " + std::string(peer)
                            + " failed: " + error.message());
  return moved;
}

boost::system::error_code connect_before(tcp_socket& socket,
                                         const boost::asio::ip::tcp::endpoint& address,
                                         io_clock::time_point deadline) {
  boost::system::error_code error;
  socket.close(error);
  socket.open(address.protocol(), error);
  if (!error)
    socket.native_non_blocking(true, error);
  if (error)
    return error;
  // Asio's own connect waits without a limit even on a non-blocking
  // socket, so the wait is poll(2)'s.
  if (::connect(socket.native_handle(), address.data(), address.size()) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) {
      error.assign(errno, boost::system::system_category());
    } else {
      pollfd entry{socket.native_handle(), POLLOUT, 0};
      if (!poll_until({&entry, 1}, deadline)) {
        error = boost::asio::error::timed_out;
      } else {
        int status = 0;
        socklen_t size = sizeof status;
        if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &status, &size) != 0)
          status = errno;
        if (status != 0)
          error.assign(status, boost::system::system_category());
      }
    }
  }
  if (!error)
    socket.native_non_blocking(false, error);
  if (error)
    socket.close();
  return error;
}

void read_exact(tcp_socket& socket, std::span<std::uint8_t> buffer, io_clock::time_point deadline) {
  socket.non_blocking(true);
  std::size_t done = 0;
  while (done < buffer.size()) {
    boost::system::error_code error;
    const auto got = moved_or_closed(
      socket.read_some(boost::asio::buffer(buffer.data() + done, buffer.size() - done), error),
      error, "the peer");
    done += got;
    if (got == 0 && !wait_ready(socket, POLLIN, deadline))
      late("send");
  }
}

void write_all(tcp_socket& socket, std::initializer_list<std::span<const std::uint8_t>> parts,
               io_clock::time_point deadline) {
  socket.non_blocking(true);
  std::vector<boost::asio::const_buffer> pending;
  for (const auto part : parts)
    if (!part.empty())
      pending.emplace_back(part.data(), part.size());
  auto first = pending.begin();
  while (first != pending.end()) {
    boost::system::error_code error;
    auto written =
      moved_or_closed(socket.write_some(std::span(first, pending.end()), error), error, "the peer");
    if (written == 0) {
      if (!wait_ready(socket, POLLOUT, deadline))
        late("read what was sent");
      continue;
    }
    // Drop what went out: whole buffers, then the front of the next.
    while (first != pending.end() && written >= first->size()) {
      written -= first->size();
      ++first;
    }
    if (first != pending.end())
      *first += written;
  }
}

} // namespace lockstep::detail

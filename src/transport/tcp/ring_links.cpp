#include "transport/tcp/ring_links.hpp"

#include "transport/tcp/authenticate.hpp"
#include "transport/tcp/little_endian.hpp"

#include "runtime/spin_wait.hpp"
#include "runtime/thread_start.hpp"
#include "runtime/timeline.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include <sys/socket.h>

namespace lockstep::detail {

namespace {

std::string worker(std::size_t rank) {
  return "worker " + std::to_string(rank);
}

/// One non-blocking write to `peer`; the bytes sent, 0 when it would block.
/// (The peer's name is only spelt out for an error: this runs in a spin.)
std::size_t send_some(tcp_socket& socket, std::span<const std::uint8_t> data, std::size_t peer) {
  boost::system::error_code error;
  const auto sent = socket.write_some(boost::asio::buffer(data.data(), data.size()), error);
  if (!error || error == boost::asio::error::would_block)
    return error ? 0 : sent;
  return moved_or_closed(sent, error, worker(peer));
}

/// One non-blocking read from the previous rank (what an earlier frame's
/// read took ahead first); the bytes received, 0 when it would block.
std::size_t receive_some(ring_links& links, std::span<std::uint8_t> data) {
  if (links.ahead_at < links.ahead.size()) {
    const auto n = std::min(data.size(), links.ahead.size() - links.ahead_at);
    std::memcpy(data.data(), links.ahead.data() + links.ahead_at, n);
    links.ahead_at += n;
    return n;
  }
  boost::system::error_code error;
  const auto got = links.prev.read_some(boost::asio::buffer(data.data(), data.size()), error);
  if (!error || error == boost::asio::error::would_block)
    return error ? 0 : got;
  return moved_or_closed(got, error, worker(links.prev_rank()));
}

/// Puts `early` (read past a frame's end) before what `ahead` still holds.
void keep_ahead(ring_links& links, std::span<const std::uint8_t> early) {
  bytes rest(links.ahead.begin() + static_cast<std::ptrdiff_t>(links.ahead_at), links.ahead.end());
  links.ahead.assign(early.begin(), early.end());
  links.ahead.insert(links.ahead.end(), rest.begin(), rest.end());
  links.ahead_at = 0;
}

/// Polls `fds` without sleeping for up to `budget`; true once one is ready.
/// A zero-timeout poll(2) reads the sockets' state without taking their
/// locks, where a retried send or receive would lock the socket that the
/// peer's send is delivering into (on loopback, from the peer's CPU).
bool spin_until_ready(std::span<pollfd> fds, std::chrono::microseconds budget) {
  if (budget.count() <= 0)
    return false;
  const auto until = io_clock::now() + budget;
  do {
    if (::poll(fds.data(), fds.size(), 0) > 0)
      return true;
  } while (io_clock::now() < until);
  return false;
}

/// The loop of exchange() and exchange_frame(): sends `out` while it
/// receives into `in`; after each read, `arrived(received)` returns the
/// buffer to go on with (exchange_frame's grows once the length is in).
template <class Arrived>
void send_and_receive(ring_links& links, std::span<const std::uint8_t> out,
                      std::span<std::uint8_t> in, Arrived arrived,
                      io_clock::time_point deadline) {
  // Set once: asio's non_blocking(true) is an ioctl(2) each time.
  for (auto* socket : {&links.next, &links.prev})
    if (!socket->non_blocking())
      socket->non_blocking(true);
  std::size_t sent = 0;
  std::size_t received = 0;
  const auto budget = links.spin_budget();
  while (sent < out.size() || received < in.size()) {
    std::size_t moved = 0;
    if (sent < out.size()) {
      const auto n = send_some(links.next, out.subspan(sent), links.next_rank());
      sent += n;
      moved += n;
    }
    if (received < in.size()) {
      const auto n = receive_some(links, in.subspan(received));
      if (n > 0)
        in = arrived(received += n);
      moved += n;
    }
    if (moved > 0)
      continue;
    const timeline_wait waiting; // the collective's span tells it from reducing
    pollfd fds[2] = {
      {links.next.native_handle(), static_cast<short>(sent < out.size() ? POLLOUT : 0), 0},
      {links.prev.native_handle(), static_cast<short>(received < in.size() ? POLLIN : 0), 0}};
    if (spin_until_ready(fds, budget))
      continue;
    if (!poll_until(fds, deadline))
      throw ring_deadline_passed(received < in.size()
                            ? "no data came from " + worker(links.prev_rank())
                                + " before the deadline"
                            : worker(links.next_rank())
                                + " did not take the data sent to it before the deadline");
  }
}

} // namespace

void ring_links::exchange(std::span<const std::uint8_t> out, std::span<std::uint8_t> in,
                          io_clock::time_point deadline) {
  send_and_receive(*this, out, in, [in](std::size_t) { return in; }, deadline);
}

void ring_links::exchange_frame(std::span<const std::uint8_t> out, bytes& in,
                                std::size_t max_bytes, io_clock::time_point deadline) {
  constexpr std::size_t length_bytes = 8;
  in.resize(std::max(length_bytes, out.size())); // as far as this rank's own frame
  bool sized = false;
  const auto arrived = [&](std::size_t received) -> std::span<std::uint8_t> {
    if (!sized && received >= length_bytes) {
      sized = true;
      const auto length = load_le<std::uint64_t>(in);
      if (length > max_bytes)
        throw connection_closed(worker(prev_rank()) + " sent a record of "
                                + std::to_string(length) + " bytes, more than any worker sends");
      const auto frame = length_bytes + length;
      if (received > frame) // a shorter frame than ours: the rest comes later
        keep_ahead(*this, std::span(in).subspan(frame, received - frame));
      in.resize(frame);
    }
    return in;
  };
  send_and_receive(*this, out, in, arrived, deadline);
}

std::chrono::microseconds ring_links::spin_budget() {
  const auto now = io_clock::now();
  if (now - spin_checked > std::chrono::milliseconds{10}) {
    spin = spin_budget_on_this_host();
    spin_checked = now;
  }
  return spin;
}

void ring_links::close() noexcept {
  boost::system::error_code ignored;
  next.close(ignored);
  prev.close(ignored);
}

void ring_links::shut_down() noexcept {
  for (auto* socket : {&next, &prev})
    if (socket->is_open())
      ::shutdown(socket->native_handle(), SHUT_RDWR);
}

void connect_ring(ring_links& links, boost::asio::ip::tcp::acceptor& acceptor,
                  const boost::asio::ip::tcp::endpoint& next_address,
                  std::span<const std::uint8_t> token, const handshake_identity& self,
                  io_clock::time_point deadline) {
  std::exception_ptr accept_failure;
  auto accepting = start_thread("accepting the ring connection", [&] {
    try {
      // A connection that fails the handshake, or comes from another rank,
      // is dropped and the next one awaited, until the deadline.
      acceptor.non_blocking(true);
      for (;;) {
        boost::system::error_code error;
        acceptor.accept(links.prev, error);
        if (error == boost::asio::error::would_block) {
          pollfd entry{acceptor.native_handle(), POLLIN, 0};
          if (!poll_until({&entry, 1}, deadline))
            throw timeout_error(worker(links.prev_rank()) + " did not connect before the deadline");
          continue;
        }
        if (error)
          throw connection_closed("accepting the ring connection failed: " + error.message());
        try {
          links.prev.set_option(boost::asio::ip::tcp::no_delay(true));
          const auto peer = authenticate_server(links.prev, token, self, deadline);
          if (peer.rank == links.prev_rank())
            return;
        } catch (const handshake_refused&) {
        } catch (const connection_closed&) {
        }
        links.prev.close();
      }
    } catch (...) {
      accept_failure = std::current_exception();
    }
  });
  std::exception_ptr connect_failure;
  try {
    const auto address =
      next_address.address().to_string() + ":" + std::to_string(next_address.port());
    dial(links.next, next_address, worker(links.next_rank()) + " at " + address, deadline);
    // Small records (lengths, fingerprints) must not wait for Nagle's
    // delayed acknowledgements (network.md §1.5: 88 ms a round trip).
    links.next.set_option(boost::asio::ip::tcp::no_delay(true));
    const auto peer = authenticate_client(links.next, token, self, address, deadline);
    if (peer.rank != links.next_rank())
      throw authentication_error("the worker at " + address + " is rank "
                                 + std::to_string(peer.rank) + ", not the next rank "
                                 + std::to_string(links.next_rank()));
  } catch (...) {
    connect_failure = std::current_exception();
  }
  accepting.join();
  if (connect_failure)
    std::rethrow_exception(connect_failure);
  if (accept_failure)
    std::rethrow_exception(accept_failure);
}

} // namespace lockstep::detail

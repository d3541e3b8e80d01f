#include "transport/tcp/ring_links.hpp"

#include "transport/tcp/authenticate.hpp"
#include "transport/tcp/dial_host.hpp"
#include "runtime/little_endian.hpp"

#include "runtime/fault_injection.hpp"
#include "runtime/spin_wait.hpp"
#include "runtime/timeline.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

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
  return moved_or_closed(got, error, worker(links.prev_worker()));
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
      const auto n = send_some(links.next, out.subspan(sent), links.next_worker());
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
      throw link_deadline_passed(received < in.size()
                            ? "no data came from " + worker(links.prev_worker())
                                + " before the deadline"
                            : worker(links.next_worker())
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
        throw connection_closed(worker(prev_worker()) + " sent a record of "
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

namespace {

/// Waits until `own` is ready (true) or the deadline passes (false),
/// handing each watched entry that becomes ready meanwhile to the watch.
/// An `own` of fd -1 only waits (and watches).
bool wait_watching(pollfd own, io_clock::time_point deadline, ring_watch& watch) {
  std::vector<pollfd> fds{own};
  fds.insert(fds.end(), watch.entries.begin(), watch.entries.end());
  for (;;) {
    for (auto& entry : fds)
      entry.revents = 0;
    if (!poll_until(fds, deadline))
      return false;
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0 && !watch.ready(i - 1))
        fds[i].fd = watch.entries[i - 1].fd = -1; // poll(2) skips it from now on
    if (fds[0].revents != 0)
      return true;
  }
}

/// Inside a catch block of connect_ring's client side: the next worker
/// passed the rendezvous with this token, job and generation, so a
/// connection it closes now means that it left; other failures are
/// authenticate_client's.
[[noreturn]] void rethrow_client_failure(std::size_t next_rank, const std::string& address) {
  try {
    throw;
  } catch (const connection_closed&) {
    throw peer_lost_error(worker(next_rank) + " at " + address
                          + " left while the workers connected their ring (its ring "
                            "connection closed during the handshake)");
  } catch (...) {
    rethrow_as_client_error(address);
  }
}

/// The server's side of the ring's handshake with whoever connects to the
/// acceptor, in the two halves that connect_ring interleaves with its
/// client side: a connection that fails either half is dropped, and the
/// next one awaited until the deadline.
class ring_server {
public:
  ring_server(ring_links& links, boost::asio::ip::tcp::acceptor& acceptor,
              std::span<const std::uint8_t> token, const handshake_identity& self,
              io_clock::time_point deadline, ring_watch& watch)
    : links_(links), acceptor_(acceptor), token_(token), self_(self), deadline_(deadline),
      watch_(watch) {
    acceptor_.non_blocking(true);
  }

  /// Accepts connections until one sends a hello that passes, from the
  /// previous rank; its challenge is sent. A connection that sends no
  /// such hello holds this for handshake_timeout at most.
  void challenge() {
    do
      accept();
    while (!kept_if([&] {
      handshake_.emplace(token_, self_);
      bytes head(hello_head_size);
      read(head);
      bytes job_id(handshake_->job_id_length(head));
      read(job_id);
      const auto challenge = handshake_->challenge(head, job_id);
      if (handshake_->peer().rank != links_.prev_worker())
        return false;
      write_all(links_.prev, {challenge}, until_);
      // Its response follows its own turn as a server, which waits on its
      // previous rank: the ring's deadline, not a stranger's.
      until_ = deadline_;
      return true;
    }));
  }

  /// Checks the challenged connection's response and accepts it; false
  /// (the connection dropped) when its proof fails.
  bool accept_response() {
    return kept_if([&] {
      bytes response(response_size);
      read(response);
      write_all(links_.prev, {handshake_->accept(response)}, until_);
      return true;
    });
  }

private:
  /// `step(...)` on the accepted connection: whether it passed. One that
  /// did not, or failed as a stranger's would, is dropped.
  template <class Step>
  bool kept_if(Step step) {
    bool kept = false;
    try {
      kept = step();
    } catch (const handshake_refused&) {
    } catch (const connection_closed&) {
    } catch (const timeout_error&) {
    }
    if (!kept)
      links_.prev.close();
    return kept;
  }

  void accept() {
    for (;;) {
      boost::system::error_code error;
      acceptor_.accept(links_.prev, error);
      if (!error)
        break;
      if (error != boost::asio::error::would_block)
        throw connection_closed("accepting the ring connection failed: " + error.message());
      if (!wait_watching({acceptor_.native_handle(), POLLIN, 0}, deadline_, watch_))
        throw timeout_error(worker(links_.prev_worker()) + " did not connect before the deadline");
    }
    links_.prev.set_option(boost::asio::ip::tcp::no_delay(true));
    until_ = std::min(deadline_, io_clock::now() + handshake_timeout); // a stranger's slot
  }

  void read(std::span<std::uint8_t> buffer) {
    if (!wait_watching({links_.prev.native_handle(), POLLIN, 0}, until_, watch_))
      throw timeout_error("the ring's handshake did not finish in time");
    read_exact(links_.prev, buffer, until_);
  }

  ring_links& links_;
  boost::asio::ip::tcp::acceptor& acceptor_;
  std::span<const std::uint8_t> token_;
  const handshake_identity& self_;
  io_clock::time_point deadline_;
  ring_watch& watch_;
  std::optional<server_handshake> handshake_;
  io_clock::time_point until_{};
};

} // namespace

void connect_ring(ring_links& links, boost::asio::ip::tcp::acceptor& acceptor,
                  const boost::asio::ip::tcp::endpoint& next_address,
                  std::span<const std::uint8_t> token, const handshake_identity& self,
                  io_clock::time_point deadline, ring_watch watch) {
  const network_address next{next_address.address().to_string(), next_address.port()};
  const auto address = next.to_string();
  client_handshake client{token, self};
  ring_server server{links, acceptor, token, self, deadline, watch};
  // A step of the client side, its failures as rethrow_client_failure's.
  const auto as_client = [&](auto step) {
    try {
      return step();
    } catch (...) {
      rethrow_client_failure(links.next_worker(), address);
    }
  };
  const auto read_from_next = [&](std::size_t size) {
    bytes buffer(size);
    if (!wait_watching({links.next.native_handle(), POLLIN, 0}, deadline, watch))
      throw timeout_error("the peer did not send before the deadline");
    read_exact(links.next, buffer, deadline);
    return buffer;
  };
  // The previous rank's hello reaches us after its dial, whatever we do;
  // our challenge, after our dial and hello; and so on down the steps.
  dial_host(links.next, next, worker(links.next_worker()), deadline, system_resolver(),
            {.sleep = [&](std::chrono::milliseconds pause) {
              wait_watching({-1, 0, 0}, io_clock::now() + pause, watch);
            }});
  // Small records (lengths, fingerprints) must not wait for Nagle's
  // delayed acknowledgements (network.md §1.5: 88 ms a round trip).
  links.next.set_option(boost::asio::ip::tcp::no_delay(true));
  as_client([&] { write_all(links.next, {client.hello()}, deadline); });
  fault_point("ring-connect");
  server.challenge();
  as_client([&] {
    write_all(links.next, {client.respond(read_from_next(challenge_size))}, deadline);
  });
  // Past a stranger that failed its response, the next connection's whole
  // handshake: the client side needs nothing more from this side.
  while (!server.accept_response())
    server.challenge();
  const auto peer = as_client([&] { return client.finish(read_from_next(acceptance_size)); });
  if (peer.rank != links.next_worker())
    throw authentication_error("the worker at " + address + " is rank "
                               + std::to_string(peer.rank) + ", not the next rank "
                               + std::to_string(links.next_worker()));
}

} // namespace lockstep::detail

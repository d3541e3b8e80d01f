#include "transport/tcp/ring_links.hpp"

#include "transport/tcp/authenticate.hpp"
#include "transport/tcp/dial_host.hpp"

#include "runtime/fault_injection.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <poll.h>

#include <algorithm>
#include <optional>
#include <vector>

#include <sys/socket.h>

namespace lockstep::detail {

namespace {

std::string worker(std::size_t rank) {
  return "worker " + std::to_string(rank);
}

} // namespace

void ring_links::exchange(std::span<const std::uint8_t> out, std::span<std::uint8_t> in,
                          io_clock::time_point deadline) {
  duplex_exchange({&next, next_worker(), &prev, prev_worker(), &ahead}, out, in, spin.get(),
                  deadline);
}

void ring_links::exchange_frame(std::span<const std::uint8_t> out, bytes& in,
                                std::size_t max_bytes, io_clock::time_point deadline) {
  duplex_exchange_frame({&next, next_worker(), &prev, prev_worker(), &ahead}, out, in, max_bytes,
                        spin.get(), deadline);
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
                  std::span<const std::uint8_t> token, const handshake_identity& identity,
                  io_clock::time_point deadline, ring_watch watch) {
  auto self = identity;
  self.purpose = connection_purpose::ring; // a mesh connection's hello is refused
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

#include "transport/tcp/mesh_links.hpp"

#include "transport/tcp/authenticate.hpp"
#include "transport/tcp/dial_host.hpp"

#include "lockstep/error.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <optional>
#include <string>

namespace lockstep::detail {

mesh_links::mesh_links(std::size_t rank, std::size_t world, boost::asio::io_context& context,
                       std::vector<std::size_t> workers)
  : rank_(rank), world_(world), ahead_(world), workers_(std::move(workers)) {
  if (world == 0 || rank >= world)
    throw value_error("mesh_links: position " + std::to_string(rank) + " of a mesh of "
                      + std::to_string(world));
  if (!workers_.empty() && workers_.size() != world)
    throw value_error("mesh_links: " + std::to_string(workers_.size())
                      + " workers named for a mesh of " + std::to_string(world));
  sockets_.reserve(world);
  for (std::size_t p = 0; p < world; ++p)
    sockets_.emplace_back(context);
}

void mesh_links::close() noexcept {
  boost::system::error_code ignored;
  for (auto& socket : sockets_)
    socket.close(ignored);
}

void mesh_links::shut_down() noexcept {
  for (auto& socket : sockets_)
    if (socket.is_open())
      ::shutdown(socket.native_handle(), SHUT_RDWR);
}

namespace {

std::string worker(std::size_t number) {
  return "worker " + std::to_string(number);
}

/// Waits (watching) until `socket` has bytes, then reads `buffer` whole,
/// both by `until`; `waiting` says what for, in the timeout_error.
void read_watching(tcp_socket& socket, std::span<std::uint8_t> buffer,
                   io_clock::time_point until, ring_watch& watch, const std::string& waiting) {
  if (!wait_watching({socket.native_handle(), POLLIN, 0}, until, watch))
    throw timeout_error(waiting);
  read_exact(socket, buffer, until);
}

/// The position of worker `number` in the mesh, if it has one.
std::optional<std::size_t> position_of(const mesh_links& links, std::size_t number) {
  if (links.workers().empty())
    return number < links.world() ? std::optional(number) : std::nullopt;
  const auto& workers = links.workers();
  const auto at = std::find(workers.begin(), workers.end(), number);
  if (at == workers.end())
    return std::nullopt;
  return static_cast<std::size_t>(at - workers.begin());
}

/// The lower positions not yet connected, as "worker 1, worker 3".
std::string awaited(const mesh_links& links, const std::vector<bool>& connected) {
  std::string names;
  for (std::size_t p = 0; p < links.rank(); ++p)
    if (!connected[p])
      names += (names.empty() ? "" : ", ") + worker(links.worker_of(p));
  return names;
}

/// The server's handshake on `socket`, just accepted: the position of the
/// lower worker it proves to be, or nothing when it fails as a stranger's
/// would or is no lower position still awaited (the caller drops it). A
/// connection holds this for handshake_timeout at most.
std::optional<std::size_t> serve(const mesh_links& links, tcp_socket& socket,
                                 std::span<const std::uint8_t> token,
                                 const handshake_identity& self,
                                 const std::vector<bool>& connected,
                                 io_clock::time_point deadline, ring_watch& watch) {
  const auto until = std::min(deadline, io_clock::now() + handshake_timeout);
  const std::string slow = "a mesh handshake did not finish in time";
  try {
    server_handshake handshake{token, self};
    bytes head(hello_head_size);
    read_watching(socket, head, until, watch, slow);
    bytes job_id(handshake.job_id_length(head));
    read_exact(socket, job_id, until);
    const auto challenge = handshake.challenge(head, job_id);
    const auto position = position_of(links, handshake.peer().rank);
    if (!position || *position >= links.rank() || connected[*position])
      return std::nullopt;
    write_all(socket, {challenge}, until);
    bytes response(response_size);
    read_watching(socket, response, until, watch, slow);
    write_all(socket, {handshake.accept(response)}, until);
    return position;
  } catch (const handshake_refused&) {
  } catch (const connection_closed&) {
  } catch (const timeout_error&) {
  }
  return std::nullopt;
}

/// Accepts connections on `acceptor` until every lower position has one
/// that passed the server's handshake.
void accept_lower(mesh_links& links, boost::asio::ip::tcp::acceptor& acceptor,
                  std::span<const std::uint8_t> token, const handshake_identity& self,
                  io_clock::time_point deadline, ring_watch& watch) {
  std::vector<bool> connected(links.rank(), false);
  acceptor.non_blocking(true);
  auto context = acceptor.get_executor();
  for (std::size_t left = links.rank(); left > 0;) {
    tcp_socket socket(context);
    boost::system::error_code error;
    acceptor.accept(socket, error);
    if (error == boost::asio::error::would_block) {
      if (!wait_watching({acceptor.native_handle(), POLLIN, 0}, deadline, watch))
        throw timeout_error(awaited(links, connected)
                            + " did not connect the mesh before the deadline");
      continue;
    }
    if (error)
      throw connection_closed("accepting a mesh connection failed: " + error.message());
    socket.set_option(boost::asio::ip::tcp::no_delay(true));
    const auto position = serve(links, socket, token, self, connected, deadline, watch);
    if (!position)
      continue; // dropped: the socket closes here
    links.socket(*position) = std::move(socket);
    connected[*position] = true;
    --left;
  }
}

/// Dials position `peer` at `address` and runs the client's handshake;
/// again after each refusal before the challenge, until the deadline.
void dial_higher(mesh_links& links, std::size_t peer, const boost::asio::ip::tcp::endpoint& address,
                 std::span<const std::uint8_t> token, const handshake_identity& self,
                 io_clock::time_point deadline, ring_watch& watch) {
  const network_address where{address.address().to_string(), address.port()};
  const auto name = worker(links.worker_of(peer));
  const auto who = name + " at " + where.to_string();
  const auto sleep = [&](std::chrono::milliseconds pause) {
    wait_watching({-1, 0, 0}, std::min(deadline, io_clock::now() + pause), watch);
  };
  auto& socket = links.socket(peer);
  auto pause = first_dial_pause;
  for (;;) {
    dial_host(socket, where, name, deadline, system_resolver(), {.sleep = sleep});
    // Small records (lengths, fingerprints) must not wait for Nagle's
    // delayed acknowledgements (network.md §1.5).
    socket.set_option(boost::asio::ip::tcp::no_delay(true));
    client_handshake client{token, self};
    bool heard = false;
    const std::string slow = who + " did not finish the mesh's handshake before the deadline";
    try {
      write_all(socket, {client.hello()}, deadline);
      bytes challenge(challenge_size);
      read_watching(socket, std::span(challenge).first(1), deadline, watch, slow);
      heard = true;
      read_exact(socket, std::span(challenge).subspan(1), deadline);
      write_all(socket, {client.respond(challenge)}, deadline);
      bytes acceptance(acceptance_size);
      read_watching(socket, acceptance, deadline, watch, slow);
      const auto proven = client.finish(acceptance);
      if (proven.rank != links.worker_of(peer))
        throw authentication_error("the worker at " + where.to_string() + " is worker "
                                   + std::to_string(proven.rank) + ", not "
                                   + std::to_string(links.worker_of(peer)));
      return;
    } catch (const connection_closed&) {
      socket.close();
      if (heard) // it passed the rendezvous with this token: it left
        throw peer_lost_error(who + " left while the workers connected their mesh (its mesh "
                                    "connection closed during the handshake)");
      // Closed before its challenge: it still awaits its ring connection at
      // that listener, which refuses a mesh hello. Again, until the deadline.
      if (io_clock::now() + pause >= deadline)
        throw timeout_error(who + " refused the mesh connection until the deadline (it closed "
                                  "the connection after each hello: another job, generation or "
                                  "connection purpose)");
      sleep(pause);
      pause = std::min(pause * 2, longest_dial_pause);
    } catch (const handshake_refused&) {
      throw authentication_error("authentication with " + where.to_string()
                                 + " failed: it did not prove the cluster token");
    }
  }
}

} // namespace

void connect_mesh(mesh_links& links, boost::asio::ip::tcp::acceptor& acceptor,
                  std::span<const boost::asio::ip::tcp::endpoint> addresses,
                  std::span<const std::uint8_t> token, const handshake_identity& identity,
                  io_clock::time_point deadline, ring_watch watch) {
  if (addresses.size() != links.world())
    throw value_error("connect_mesh: " + std::to_string(addresses.size())
                      + " addresses for a mesh of " + std::to_string(links.world()));
  auto self = identity;
  self.purpose = connection_purpose::mesh; // a ring connection's hello is refused
  accept_lower(links, acceptor, token, self, deadline, watch);
  for (auto peer = links.rank() + 1; peer < links.world(); ++peer)
    dial_higher(links, peer, addresses[peer], token, self, deadline, watch);
}

} // namespace lockstep::detail

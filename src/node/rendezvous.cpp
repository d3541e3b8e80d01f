#include "node/rendezvous.hpp"

#include "node/control_messages.hpp"
#include "runtime/log.hpp"
#include "transport/tcp/authenticate.hpp"

#include "lockstep/error.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <map>
#include <optional>

namespace lockstep::detail {

namespace {

namespace asio = boost::asio;
using actors::join_reply;
using actors::join_request;
using actors::member;
using actors::membership;

std::string worker(std::uint32_t rank) {
  return "worker " + std::to_string(rank);
}

/// A per-connection deadline: the handshake's, within the rendezvous's.
io_clock::time_point step_deadline(io_clock::time_point overall) {
  return std::min(overall, io_clock::now() + handshake_timeout);
}

handshake_identity identity_of(const rendezvous_settings& settings) {
  return {settings.spec.job_id, settings.spec.generation,
          static_cast<std::uint32_t>(settings.spec.rank)};
}

/// Why the coordinator refuses `request` from the worker that proved
/// `handshake_rank`, or nothing when it fits.
std::optional<std::string> refusal(const join_request& request, std::uint32_t handshake_rank,
                                   const rendezvous_settings& settings,
                                   const std::map<std::uint32_t, join_request>& joined) {
  const auto who = worker(handshake_rank);
  const auto world = settings.spec.world_size;
  if (request.protocol_version != actors::wire_protocol_version)
    return who + ": wire protocol version " + std::to_string(request.protocol_version)
           + ", the coordinator's is " + std::to_string(actors::wire_protocol_version)
           + " (run the same lockstep on every worker)";
  if (request.rank != handshake_rank)
    return who + ": its join names rank " + std::to_string(request.rank)
           + " but its handshake rank " + std::to_string(handshake_rank);
  if (request.job_id != settings.spec.job_id)
    return who + ": job id '" + request.job_id + "', the coordinator's is '"
           + settings.spec.job_id + "'";
  if (request.world_size != world)
    return who + ": world size " + std::to_string(request.world_size)
           + ", the coordinator's is " + std::to_string(world);
  if (request.rank == 0 || request.rank >= world)
    return who + ": rank " + std::to_string(request.rank) + " is not a worker rank of a world of "
           + std::to_string(world) + " (1 to " + std::to_string(world - 1) + " join rank 0)";
  if (joined.contains(request.rank))
    return who + ": rank " + std::to_string(request.rank) + " has already joined";
  if (request.local_replicas != settings.local_replicas)
    return who + ": " + std::to_string(request.local_replicas)
           + " local replicas, the coordinator has " + std::to_string(settings.local_replicas)
           + "; every worker must have the same number of devices";
  if (request.config_fingerprint != settings.config_fingerprint)
    return who + ": configuration fingerprint " + std::to_string(request.config_fingerprint)
           + ", the coordinator's is " + std::to_string(settings.config_fingerprint)
           + " (lockstep's version or the replicas per worker differ)";
  return std::nullopt;
}

std::string missing_ranks(const std::map<std::uint32_t, join_request>& joined, std::size_t world) {
  std::string text;
  for (std::uint32_t r = 1; r < world; ++r)
    if (!joined.contains(r))
      text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

/// Takes the next connection from `acceptor` into `socket`; false at the
/// deadline.
bool accept_until(asio::ip::tcp::acceptor& acceptor, tcp_socket& socket,
                  io_clock::time_point deadline) {
  acceptor.non_blocking(true);
  for (;;) {
    boost::system::error_code error;
    acceptor.accept(socket, error);
    if (!error)
      return true;
    if (error != asio::error::would_block && error != asio::error::try_again)
      throw connection_closed("accepting a control connection failed: " + error.message());
    pollfd entry{acceptor.native_handle(), POLLIN, 0};
    if (!poll_until({&entry, 1}, deadline))
      return false;
  }
}

} // namespace

boost::asio::ip::tcp::endpoint resolve_endpoint(asio::io_context& context,
                                                const std::string& host, std::uint16_t port,
                                                const std::string& what) {
  asio::ip::tcp::resolver resolver(context);
  boost::system::error_code error;
  const auto endpoints = resolver.resolve(host, std::to_string(port), error);
  if (error || endpoints.empty())
    throw value_error("cluster: cannot resolve " + what + " '" + host + "': "
                      + (error ? error.message() : "no address"));
  return endpoints.begin()->endpoint();
}

std::string advertised_host(const std::string& host, const std::string& fallback) {
  if (host.empty() || host == "0.0.0.0" || host == "::")
    return fallback;
  return host;
}

rendezvous_result coordinate_rendezvous(asio::ip::tcp::acceptor& acceptor,
                                        const rendezvous_settings& settings) {
  const auto world = settings.spec.world_size;
  const auto deadline = io_clock::now() + settings.join_timeout;
  const auto self = identity_of(settings);
  std::map<std::uint32_t, join_request> joined;
  std::map<std::uint32_t, tcp_socket> sockets;
  while (joined.size() + 1 < world) {
    tcp_socket socket(acceptor.get_executor());
    if (!accept_until(acceptor, socket, deadline))
      throw timeout_error("rendezvous of job '" + settings.spec.job_id + "': worker(s) "
                          + missing_ranks(joined, world) + " of " + std::to_string(world)
                          + " did not join within "
                          + std::to_string(settings.join_timeout.count()) + " ms");
    boost::system::error_code ignored;
    const auto remote = socket.remote_endpoint(ignored);
    const auto from = remote.address().to_string() + ":" + std::to_string(remote.port());
    try {
      socket.set_option(asio::ip::tcp::no_delay(true));
      const auto peer = authenticate_server(socket, settings.token, self, step_deadline(deadline));
      auto request = receive_control<join_request>(socket, step_deadline(deadline));
      if (auto why = refusal(request, peer.rank, settings, joined)) {
        LOCKSTEP_LOG_WARN("rendezvous: refused {} from {}: {}", worker(peer.rank), from, *why);
        join_reply no;
        no.refusal = {error_kind::value_error, *why, "lockstep::value_error"};
        send_control(socket, no, step_deadline(deadline));
        continue; // the socket closes; wait for the right worker
      }
      join_reply yes;
      yes.accepted = true;
      send_control(socket, yes, step_deadline(deadline));
      if (request.host.empty())
        request.host = remote.address().to_string();
      LOCKSTEP_LOG_INFO("rendezvous: {} joined from {}", worker(request.rank), from);
      sockets.emplace(request.rank, std::move(socket));
      joined.emplace(request.rank, std::move(request));
    } catch (const std::exception& e) {
      // A stranger, a wrong token, garbage or a slow client: dropped, and
      // the cluster keeps waiting for its workers.
      LOCKSTEP_LOG_WARN("rendezvous: dropped a connection from {}: {}", from, e.what());
    }
  }
  rendezvous_result result;
  auto& m = result.membership;
  m.job_id = settings.spec.job_id;
  m.generation = settings.spec.generation;
  m.members.push_back({0,
                       advertised_host(settings.data_address.host,
                                       settings.spec.coordinator ? settings.spec.coordinator->host
                                                                 : "127.0.0.1"),
                       settings.data_address.port, settings.local_replicas, 0});
  for (const auto& [rank, request] : joined)
    m.members.push_back({rank, request.host, request.port, request.local_replicas,
                         request.host_hash});
  result.control.emplace_back(acceptor.get_executor()); // rank 0: itself
  for (auto& [rank, socket] : sockets) {
    send_control(socket, m, step_deadline(deadline));
    result.control.push_back(std::move(socket));
  }
  return result;
}

rendezvous_result join_rendezvous(asio::io_context& context, const rendezvous_settings& settings) {
  const auto& spec = settings.spec;
  if (!spec.coordinator)
    throw value_error("rendezvous: worker " + std::to_string(spec.rank)
                      + " has no coordinator address");
  const auto deadline = io_clock::now() + settings.join_timeout;
  const auto coordinator = spec.coordinator->to_string();
  rendezvous_result result;
  auto& socket = result.control.emplace_back(context);
  dial_host(socket, *spec.coordinator, "the coordinator", deadline,
            settings.resolve ? settings.resolve : system_resolver());
  socket.set_option(asio::ip::tcp::no_delay(true));
  authenticate_client(socket, settings.token, identity_of(settings), coordinator,
                      step_deadline(deadline));
  join_request request;
  request.job_id = spec.job_id;
  request.rank = static_cast<std::uint32_t>(spec.rank);
  request.world_size = static_cast<std::uint32_t>(spec.world_size);
  request.generation = spec.generation;
  request.local_replicas = settings.local_replicas;
  request.host = advertised_host(settings.data_address.host,
                                 socket.local_endpoint().address().to_string());
  request.port = settings.data_address.port;
  request.config_fingerprint = settings.config_fingerprint;
  send_control(socket, request, step_deadline(deadline));
  const auto reply = receive_control<join_reply>(socket, deadline);
  if (!reply.accepted)
    rethrow(reply.refusal);
  result.membership = receive_control<membership>(socket, deadline);
  const auto& members = result.membership.members;
  bool in_order = members.size() == spec.world_size;
  for (std::size_t r = 0; in_order && r < members.size(); ++r)
    in_order = members[r].rank == r;
  if (!in_order || result.membership.job_id != spec.job_id
      || result.membership.generation != spec.generation)
    throw bad_control_message("the coordinator at " + coordinator
                              + " sent a membership that does not list ranks 0 to "
                              + std::to_string(spec.world_size - 1) + " of job '" + spec.job_id
                              + "', generation " + std::to_string(spec.generation));
  return result;
}

} // namespace lockstep::detail

#pragma once

// The rendezvous: how the workers of one job find each other before any
// collective (docs/multi_worker.md). Rank 0 is the coordinator: it accepts
// one control connection from every other rank; each passes the cluster's
// handshake (authenticate.hpp) and sends a join_request, which the
// coordinator checks against its own (protocol version, world size, rank,
// replicas per worker, configuration fingerprint). A worker whose request
// does not fit gets a join_reply that refuses it with a value_error naming
// the worker and the field, and the coordinator waits on for the right
// one; a connection that fails the handshake or sends anything but a
// join_request is dropped. Once every rank has joined, the coordinator
// sends each the membership (every rank's data address and replicas), and
// the control connections stay open for the heartbeats (control_links.hpp,
// actors/node_actor.hpp).
// No CAF actor system: the messages go through CAF's serialiser only.

#include "actors/wire_messages.hpp"
#include "transport/tcp/dial_host.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/socket_io.hpp"

#include "lockstep/cluster_resolver.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::detail {

struct rendezvous_settings {
  cluster_spec spec;
  bytes token;
  std::uint32_t local_replicas = 1;
  /// A hash of what must agree between workers (lockstep's version, the
  /// replicas per worker, ...).
  std::uint64_t config_fingerprint = 0;
  /// Where this worker's data listener is; a wildcard or empty host is
  /// replaced by the address the worker's control connection leaves from
  /// (rank 0: the coordinator's host).
  network_address data_address;
  std::chrono::milliseconds join_timeout{std::chrono::seconds{300}};
  /// How another rank looks up the coordinator's host; empty: the system's
  /// resolver. A seam for tests.
  host_resolver resolve;
};

struct rendezvous_result {
  actors::membership membership;
  /// The coordinator: one connection per rank, at that index (index 0 is
  /// its own and unconnected). Another worker: one, to the coordinator.
  std::vector<tcp_socket> control;
};

/// Rank 0's side, accepting on `acceptor` (listening at the coordinator
/// address). Throws timeout_error naming the ranks that did not join
/// within the join timeout.
rendezvous_result coordinate_rendezvous(boost::asio::ip::tcp::acceptor& acceptor,
                                        const rendezvous_settings& settings);

/// Another rank's side: dials the coordinator, looking its host up again
/// and trying each of its addresses on every round until the join timeout
/// (dial_host.hpp), joins and waits for the membership. Throws the
/// coordinator's refusal (value_error), authentication_error, or
/// timeout_error (naming the coordinator's address and the last reason
/// when it never accepted a connection).
rendezvous_result join_rendezvous(boost::asio::io_context& context,
                                  const rendezvous_settings& settings);

/// The first address of `host` (a name or an IP address) at `port`.
/// value_error naming `what` when it does not resolve.
boost::asio::ip::tcp::endpoint resolve_endpoint(boost::asio::io_context& context,
                                                const std::string& host, std::uint16_t port,
                                                const std::string& what);

/// The host to advertise for a listener on `host`: itself, unless it is a
/// wildcard ("", "0.0.0.0", "::"), then `fallback`.
std::string advertised_host(const std::string& host, const std::string& fallback);

} // namespace lockstep::detail

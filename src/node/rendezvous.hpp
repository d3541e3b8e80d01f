#pragma once

// The rendezvous: how the workers of one job find each other before any
// collective (docs/multi_worker.md). Rank 0 is the coordinator: it accepts
// one control connection from every other rank; each passes the cluster's
// handshake (authenticate.hpp) and sends a join_request, which the
// coordinator checks against its own (protocol version, job, world size,
// rank). The coordinator serves every connection at once (pending_join.hpp):
// a stranger that connects and stays silent, or sends garbage, costs only
// its own slot among at most max_pending_joins, the oldest dropped first.
// A worker whose request does not fit gets a join_reply that refuses it
// with a value_error naming the worker and the field, and the coordinator
// waits on for the right one; a connection that fails the handshake is
// logged at once with its address and reason (another token, job or
// generation) and named again if the join times out. Once every rank has
// joined, the coordinator compares their agreed settings
// (agreed_settings.hpp): when they differ, or when the join fails in any
// other way, every worker that joined gets the same error. Otherwise each
// gets the membership (every rank's data address and replicas), and the
// control connections stay open for the heartbeats (control_links.hpp,
// node_actor.hpp). cancel_joins() ends either side's waits at once.
// No CAF actor system: the messages go through CAF's serialiser only.

#include "node/wire_messages.hpp"
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
  /// What must agree between workers (lockstep's version, the replicas per
  /// worker, the program's settings).
  std::vector<agreed_setting> settings;
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
  detail::membership membership;
  /// The coordinator: one connection per rank, at that index (index 0 is
  /// its own and unconnected). Another worker: one, to the coordinator.
  std::vector<tcp_socket> control;
};

/// How many connections may be in their handshake at once at the
/// coordinator; a newer one drops the oldest.
inline constexpr std::size_t max_pending_joins = 64;

/// Rank 0's side, accepting on `acceptor` (listening at the coordinator
/// address). Throws timeout_error naming the ranks that did not join
/// within the join timeout and the connections refused meanwhile,
/// value_error naming the settings that differ, cancelled_error; every
/// worker that joined gets the same error.
rendezvous_result coordinate_rendezvous(boost::asio::ip::tcp::acceptor& acceptor,
                                        const rendezvous_settings& settings);

/// Another rank's side: dials the coordinator, looking its host up again
/// and trying each of its addresses on every round until the join timeout
/// (dial_host.hpp); a handshake that does not finish within
/// handshake_timeout (a coordinator busy or slowed by strangers) is tried
/// again on a new connection until the join timeout. Then it joins and
/// waits for the membership, or the coordinator's word that the join
/// failed, up to handshake_timeout past its own join timeout. Throws the coordinator's refusal or the
/// rendezvous's failure (value_error, timeout_error), authentication_error,
/// timeout_error (naming the coordinator's address and the last reason
/// when it never accepted a connection), cancelled_error.
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

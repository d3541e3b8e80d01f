#pragma once

// node: this process's membership of a multi-worker job, made once by
// multi_worker_mirrored_strategy: the rendezvous at rank 0 (rendezvous.hpp),
// the ring of data connections between the workers (the leaders' stage of
// every collective, tcp_ring_communicator.hpp) and their mesh (a
// connection to every other worker, for the algorithms that talk to any
// rank: the ring communicator's mesh(), broken with it), and the node's actor
// (node_actor.hpp), which hears the peers' heartbeats through the
// control connections (control_links.hpp) and breaks the ring when a peer
// is lost, so that every pending and later collective raises
// peer_lost_error naming it. When a collective between the workers times
// out, the ring asks the node which collective each worker reached (the
// node asks the others over the same connections) and the node passes the
// timeout on to the other workers.
//
// Listeners: rank 0 accepts control connections at the coordinator
// address; every rank accepts its ring connection and its lower ranks'
// mesh connections at its listen address (an ephemeral port where that
// port is 0 or the coordinator's own).

#include "node/clock_sync.hpp"
#include "transport/tcp/handshake.hpp"
#include "collectives/hierarchical_communicator.hpp"
#include "communicators/host_shm_communicator.hpp"
#include "communicators/mpi_workers.hpp"
#include "communicators/tcp_ring_communicator.hpp"

#include "node/wire_messages.hpp"
#include "lockstep/cluster_resolver.hpp"

#include <boost/asio/io_context.hpp>
#include <caf/actor.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace lockstep::detail {

class control_links;

struct node_settings {
  std::uint32_t local_replicas = 1;
  /// What every worker must share (rendezvous.hpp).
  std::vector<agreed_setting> settings;
  std::chrono::milliseconds join_timeout{std::chrono::seconds{300}};
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds{1}};
  std::chrono::milliseconds peer_timeout{std::chrono::seconds{10}};
  /// Keep the collectives on the TCP ring even where the workers share
  /// memory (LOCKSTEP_TRANSPORT=tcp): to compare, or to test the ring.
  bool force_tcp = false;
  /// MPI's collectives between the workers (LOCKSTEP_COMMUNICATOR=mpi:
  /// communicators/mpi_workers.hpp) instead of lockstep's transports.
  bool mpi = false;
};

class node {
public:
  /// Joins the cluster of `spec` (world_size > 1) with `token`. Throws what
  /// the rendezvous and connect_ring throw.
  node(const cluster_spec& spec, bytes token, const node_settings& settings);
  ~node();

  node(const node&) = delete;
  node& operator=(const node&) = delete;

  const detail::membership& membership() const noexcept { return membership_; }

  /// The ring of TCP connections between the workers, one rank per process.
  const std::shared_ptr<tcp_ring_communicator>& ring() const noexcept { return ring_; }
  /// What carries the collectives between the workers, one rank per
  /// process (rank = worker): MPI where the settings ask for it; the
  /// shared-memory group when all share this host's memory; when they share it in several hosts, each host's group
  /// and a ring of one leader per host (a hierarchical_communicator); else
  /// the ring of all workers (node/host_group.hpp).
  std::shared_ptr<communicator> workers() const;
  /// The coordinator's clock against this worker's, measured at the
  /// rendezvous (clock_sync.hpp); zero on the coordinator.
  const clock_estimate& clock() const noexcept { return clock_; }

private:
  /// Starts the control links, which deliver to the node actor.
  void start_links();
  /// The rings and the host's group stop asking the node actor about
  /// timeouts (they may outlive it).
  void forget_actor() noexcept;

  // Shared with the ring, whose sockets may outlive this node.
  std::shared_ptr<boost::asio::io_context> context_;
  detail::membership membership_;
  clock_estimate clock_;
  std::shared_ptr<tcp_ring_communicator> ring_;
  std::shared_ptr<host_shm_communicator> host_;      // this host's workers, if they share memory
  std::shared_ptr<tcp_ring_communicator> leaders_;   // the hosts' leaders, if this worker leads
  std::shared_ptr<hierarchical_communicator> hosts_; // several hosts: each one's group, leaders_
  mpi_workers mpi_;                                   // MPI's collectives, where asked for
  std::shared_ptr<control_links> links_;
  std::shared_ptr<caf::actor_system> system_;
  /// The node actor (node_actor.hpp), which this node starts and stops.
  caf::actor actor_;
  std::chrono::milliseconds heartbeat_interval_;
};

} // namespace lockstep::detail

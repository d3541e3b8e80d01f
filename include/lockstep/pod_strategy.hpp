#pragma once

// TF's TPUStrategy on a pod: one replica per replica of a
// device_assignment, each a replica actor (as mirrored_strategy's) on the
// device of its logical core 0, its other logical cores running parts of
// it (model parallelism). A pod of one host runs in this process; a pod of
// several hosts runs one worker process per host, each a worker of the
// multi-worker strategy's cluster (its rendezvous, ring and failure
// handling). docs/pod.md.

#include "lockstep/cluster_resolver.hpp"
#include "lockstep/device_assignment.hpp"
#include "lockstep/multi_worker_mirrored_strategy.hpp"
#include "lockstep/pod_topology.hpp"
#include "lockstep/strategy.hpp"

#include <cstddef>
#include <memory>
#include <optional>

namespace lockstep {

/// Settings of a pod strategy.
struct pod_options {
  /// TF's steps_per_run: the steps of a host loop when the call gives none
  /// (extended().experimental_run_steps_on_iterator without `iterations`).
  /// At least 1.
  std::size_t steps_per_run = 1;
  /// This host's worker settings: its devices (`local_devices`, used by
  /// the resolver's constructor; the topology's constructor takes the
  /// topology's), the deadline of `run` and of each collective
  /// (`timeout`), and, for a pod of several hosts, the join, heartbeats,
  /// peer timeout and the settings every host must share, as for
  /// multi_worker_mirrored_strategy.
  multi_worker_options cluster;
};

/// TF's TPUStrategy, "pod" where TF says "TPU". Replica r runs on
/// `device_assignment().device(r, 0)`; values, variables, reductions,
/// `run` and merge_call are mirrored_strategy's over those devices, in
/// replica order, with TF's TPUStrategy rules on top: reductions of
/// per-replica values outside `run` go to one device, non-slot state lives
/// on the host, and host loops take `steps_per_run` steps by default.
class pod_strategy : public strategy {
public:
  /// The pod `topology` (one task: this process's devices, e.g.
  /// pod_topology::from_devices(cpu_devices(4))), its replicas placed by
  /// `assignment` (unset: as TF's TPUStrategy, one replica per device of
  /// one logical core each, device_assignment::build(topology, ones, ones,
  /// topology.num_devices())). A replica of several logical cores runs on
  /// its core 0; its core k is `assignment.device(r, k)`, which
  /// strategy_extended::experimental_logical_device and
  /// replica_context::experimental_logical_device use (docs/pod.md).
  /// Throws value_error for a topology or an assignment of more than one
  /// task (a pod of several hosts is made from its cluster_resolver), an
  /// assignment on another topology, a steps_per_run of 0, and the device
  /// errors of mirrored_strategy.
  explicit pod_strategy(pod_topology topology,
                        std::optional<lockstep::device_assignment> assignment = std::nullopt,
                        pod_options options = {});

  /// TF's TPUStrategy(resolver): the pod of the cluster `resolver`
  /// describes, every worker process a host (task = rank) with this
  /// worker's devices, `options.cluster.local_devices` (empty: as
  /// multi_worker_mirrored_strategy's: LOCKSTEP_REPLICAS_PER_WORKER CPU
  /// devices, else mirrored_strategy's default), so the topology is
  /// `initialize_pod_system(resolver, local_devices).topology`. The
  /// replicas are placed by `assignment` as in the constructor above, and
  /// this process runs those on its host. Every worker runs the same
  /// program; the constructor joins the cluster as
  /// multi_worker_mirrored_strategy's does (the same errors) and
  /// collectives span the hosts through the ring between them. One
  /// process (no cluster configured) or an evaluator is the pod of its own
  /// devices. Throws value_error, before joining, for an assignment on
  /// another topology than the cluster's pod, a replica whose logical
  /// cores are on several hosts, and hosts that do not run the same number
  /// of consecutive replicas (host t runs replicas t·m .. t·m + m - 1, the
  /// multi-worker strategy's numbering).
  explicit pod_strategy(const cluster_resolver& resolver,
                        std::optional<lockstep::device_assignment> assignment = std::nullopt,
                        pod_options options = {});

  /// The cluster this host belongs to: the resolver's, or one process
  /// (world size 1) for a pod made from a topology.
  const cluster_spec& cluster() const noexcept { return *cluster_; }

  /// Where the replicas run.
  const lockstep::device_assignment& device_assignment() const noexcept { return *assignment_; }

  /// TF's num_hosts: the hosts (tasks) that run a replica's logical core 0.
  std::size_t num_hosts() const;

  /// TF's num_replicas_per_host: min(replicas, devices per host / logical
  /// cores per replica).
  std::size_t num_replicas_per_host() const noexcept;

  /// The steps of a host loop when the call gives none.
  std::size_t steps_per_run() const noexcept;

private:
  pod_strategy(std::shared_ptr<const cluster_spec> cluster,
               std::shared_ptr<const lockstep::device_assignment> assignment,
               const pod_options& options);

  std::shared_ptr<const cluster_spec> cluster_;
  std::shared_ptr<const lockstep::device_assignment> assignment_;
};

} // namespace lockstep

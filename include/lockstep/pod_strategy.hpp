#pragma once

// TF's TPUStrategy on a pod of this process's devices: one replica per
// replica of a device_assignment, each a replica actor (as
// mirrored_strategy's) on the device of its logical core 0, its other
// logical cores running parts of it (model parallelism). docs/pod.md
// says what works now and what later increments add.

#include "lockstep/device_assignment.hpp"
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
  /// task, an assignment on another topology, a steps_per_run of 0, and
  /// the device errors of mirrored_strategy.
  explicit pod_strategy(pod_topology topology,
                        std::optional<lockstep::device_assignment> assignment = std::nullopt,
                        pod_options options = {});

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
  pod_strategy(std::shared_ptr<const lockstep::device_assignment> assignment,
               const pod_options& options);

  std::shared_ptr<const lockstep::device_assignment> assignment_;
};

} // namespace lockstep

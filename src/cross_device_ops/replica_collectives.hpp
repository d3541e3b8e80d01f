#pragma once

// How a strategy's replicas all-reduce among themselves in replica context:
// chosen once, by the strategy's cross_device_ops, when the strategy is
// made (cross_device_ops::replica_collectives).

#include "collectives/collective_options.hpp"
#include "collectives/communicator.hpp"

#include "lockstep/cross_device_ops.hpp"

#include <memory>
#include <string>
#include <vector>

namespace lockstep::detail {

struct replica_collectives {
  /// Replica r is rank r; null: all_reduce goes through merge_call.
  std::shared_ptr<detail::communicator> communicator;
  /// What a replica's all_reduce passes unless its communication_options
  /// say otherwise (timeout, tag, packing).
  collective_options defaults;
};

/// Reaches cross_device_ops' private hook for the strategies.
struct cross_device_ops_access {
  static replica_collectives of(const cross_device_ops& ops,
                                const std::vector<device_spec>& devices,
                                const std::string& name) {
    return ops.replica_collectives(devices, name);
  }
};

} // namespace lockstep::detail

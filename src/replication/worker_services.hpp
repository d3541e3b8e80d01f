#pragma once

// worker_services: what a worker of a multi-worker job gives its strategy.
// The strategy's state holds it (strategy_state::services) and the layers
// below the strategies use it without knowing the cluster: variable
// creation asks it for the chief's initial values, input and checkpoints
// for the sum over the workers. A worker of a cluster implements it over
// its node and ring (src/strategies/cluster_worker.cpp);
// a strategy in one process has none (null), so its paths test for null
// and stay as they were.

#include "lockstep/detail/worker_sum.hpp"
#include "lockstep/tensor.hpp"

#include <string>

namespace lockstep::detail {

/// The services a worker gives its strategy. Holding one keeps this
/// process's cluster connections (its node) open: the strategy's state
/// lets go of it only after its replicas have stopped.
class worker_services {
public:
  virtual ~worker_services() = default;

  /// A new distributed variable's initial value as the chief has it:
  /// `initial` broadcast from worker 0, matched by the variable's `name`.
  /// Every worker calls it for the same variables in the same order.
  virtual tensor initial_value_from_chief(const tensor& initial, const std::string& name) = 0;

  /// Sums counts over the workers (input's joint end, checkpoints'
  /// agreement). The function holds the ring, not the node, so a dataset or
  /// checkpoint that outlives the strategy keeps no cluster connection open.
  virtual worker_sum sum_over_workers() const = 0;
};

} // namespace lockstep::detail

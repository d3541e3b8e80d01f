#pragma once

// What the strategies of several worker processes share
// (multi_worker_mirrored_strategy, pod_strategy across hosts): this
// worker's devices, TF's names for them once a cluster is configured, and
// the start of a worker: the node (rendezvous, ring, heartbeats), the
// cross_device_ops that span the workers, and the replicas.

#include "lockstep/cluster_resolver.hpp"
#include "lockstep/multi_worker_mirrored_strategy.hpp"

#include "replication/strategy_state.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::detail {

/// This worker's devices: `options.local_devices` (this process's; another
/// task's: value_error), else LOCKSTEP_REPLICAS_PER_WORKER CPU devices
/// (lockstep-run --replicas-per-worker sets it), else mirrored_strategy's
/// default; canonical, checked with mirrored_strategy's rules.
std::vector<device_spec> local_worker_devices(const multi_worker_options& options);

/// Runs `start` with this process's devices named after its task in
/// `cluster` (/job:worker/replica:0/task:<rank>/..., TF's names once a
/// cluster is configured), and returns what it returns; when `start`
/// throws, the devices get their former names back. For one process and
/// an evaluator, which run alone as TF's do, `start` runs with the names
/// unchanged (/job:localhost).
std::shared_ptr<strategy_state> named_after_task(
  const cluster_spec& cluster, const std::function<std::shared_ptr<strategy_state>()>& start);

/// A worker's strategy state over `devices` (this worker's, canonical, one
/// replica each), named `name` in errors. With several workers it joins
/// `cluster` as multi_worker_mirrored_strategy describes (every worker the
/// same number of replicas; timeout_error, value_error,
/// authentication_error, peer_lost_error at the join) and reduces across
/// the workers; alone, it reduces over `devices` (choose_the_best).
/// `prepare` runs on the state before the replicas start (a pod's rules).
std::shared_ptr<strategy_state> start_worker(
  const cluster_spec& cluster, std::vector<device_spec> devices,
  const multi_worker_options& options, std::string name,
  const std::function<void(strategy_state&)>& prepare = {});

} // namespace lockstep::detail

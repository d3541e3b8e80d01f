// multi_worker_mirrored_strategy: the cluster from the resolver, this
// worker's devices, named after its task, and the worker's start
// (strategies/cluster_worker.hpp: the node, the ring, cluster_all_reduce).

#include "lockstep/multi_worker_mirrored_strategy.hpp"

#include "node/join_cancellation.hpp"
#include "strategies/cluster_worker.hpp"
#include "strategies/mirrored_devices.hpp"

#include <string>

namespace lockstep {

namespace {

std::shared_ptr<detail::strategy_state> make_state(const cluster_spec& cluster,
                                                   const multi_worker_options& options) {
  return detail::named_after_task(cluster, [&] {
    auto devices = detail::local_worker_devices(options);
    const bool alone = cluster.world_size <= 1 || cluster.is_evaluator();
    auto name = "multi_worker_mirrored_strategy(worker "
                + std::to_string(alone ? 0 : cluster.rank) + " of "
                + std::to_string(alone ? 1 : cluster.world_size) + ": "
                + detail::joined_device_names(devices) + ")";
    return detail::start_worker(cluster, std::move(devices), options, std::move(name));
  });
}

} // namespace

multi_worker_mirrored_strategy::multi_worker_mirrored_strategy(const cluster_resolver& resolver,
                                                               multi_worker_options options)
  : strategy(make_state(resolver.spec(), options)),
    cluster_(std::make_shared<const cluster_spec>(resolver.spec())) {}

const cluster_spec& multi_worker_mirrored_strategy::cluster() const noexcept {
  return *cluster_;
}

bool multi_worker_mirrored_strategy::is_chief() const noexcept {
  return cluster_->is_chief();
}

void cancel_joins() noexcept {
  detail::cancel_joins_now();
}

} // namespace lockstep

// Logical cores (TF's logical_core, model parallelism inside a replica):
// strategy_extended::experimental_logical_device(id), the scope that places
// tensors and variables on a logical core, and
// replica_context::experimental_logical_device(id, fn), which runs a part of
// a replica function on that core's device executor. The pod strategy keeps
// the devices of its replicas' cores (detail::pod_rules::logical_cores);
// every other strategy has core 0 alone, the replica itself. docs/pod.md.

#include "lockstep/replica_context.hpp"
#include "lockstep/strategy.hpp"

#include "replication/strategy_state.hpp"
#include "replication/thread_mode.hpp"
#include "runtime/completion.hpp"
#include "variables/variable_creation.hpp"

#include "lockstep/error.hpp"

#include <chrono>
#include <exception>
#include <string>
#include <utility>

namespace lockstep {

namespace {

/// The logical cores of each replica of `state`: the pod's, else 1.
std::size_t cores_per_replica(const detail::strategy_state& state) {
  return state.pod ? state.pod->logical_cores.front().size() : 1;
}

/// TF's range error unless `id` is one of `state`'s logical cores.
void check_logical_device(const detail::strategy_state& state, std::size_t id) {
  const auto cores = cores_per_replica(state);
  if (id >= cores)
    throw value_error("`logical_device_id` not in range (was " + std::to_string(id)
                      + ", but there are only " + std::to_string(cores)
                      + " logical devices per replica).");
}

/// Logical core `id` of every replica of the pod `state`, in replica order.
std::vector<device_spec> core_of_every_replica(const detail::strategy_state& state,
                                               std::size_t id) {
  std::vector<device_spec> devices;
  for (const auto& cores : state.pod->logical_cores)
    devices.push_back(cores[id]);
  return devices;
}

} // namespace

logical_device_guard::logical_device_guard(std::optional<device_spec> device,
                                           std::vector<device_spec> placement) {
  if (device)
    device_.emplace(std::move(*device));
  if (!placement.empty()) { // last: nothing after it can throw
    detail::push_colocation(std::move(placement));
    placed_ = true;
  }
}

logical_device_guard::~logical_device_guard() {
  if (placed_) // then device_ ends: the reverse order of their start
    detail::pop_colocation();
}

logical_device_guard
strategy_extended::experimental_logical_device(std::size_t logical_device_id) const {
  check_logical_device(*state_, logical_device_id);
  const auto* mode = detail::current_mode();
  // Core 0 of another strategy is the replica itself, and outside this
  // strategy there is nothing to place.
  if (!state_->pod || mode == nullptr || mode->strategy != state_)
    return logical_device_guard{std::nullopt, {}};
  auto placement = core_of_every_replica(*state_, logical_device_id);
  if (mode->replica == nullptr) // cross-replica context: variables only
    return logical_device_guard{std::nullopt, std::move(placement)};
  return logical_device_guard{
    state_->pod->logical_cores.at(mode->replica_index)[logical_device_id], std::move(placement)};
}

void replica_context::run_on_logical_device(std::size_t logical_device_id,
                                            std::function<void()> fn) {
  detail::require_replica_context(*this);
  check_logical_device(*state_, logical_device_id);
  if (!state_->pod) { // core 0, this replica: its own thread
    fn();
    return;
  }
  const auto device = state_->pod->logical_cores.at(replica_id_)[logical_device_id];
  auto done = std::make_shared<detail::completion>(1);
  // The part keeps the state alive: after a timeout it may still run.
  state_->device_executor(device).post(
    [state = state_->shared_from_this(), done, ctx = this, replica = replica_id_, device,
     part = std::move(fn)]() mutable {
      std::exception_ptr error;
      try {
        // This replica's copies of variables are the part's own.
        detail::mode_guard mode{{state.get(), ctx, replica}};
        device_scope on_core{device};
        part();
      } catch (...) {
        error = std::current_exception();
      }
      done->done(std::move(error));
    });
  if (!done->wait(std::chrono::steady_clock::now() + state_->timeout))
    throw timeout_error(state_->name() + ": " + detail::describe_replica(*state_, replica_id_)
                        + ": its part on logical core " + std::to_string(logical_device_id)
                        + " (" + device.to_string() + ") did not finish within "
                        + std::to_string(state_->timeout.count()) + " ms");
  if (auto error = done->error())
    std::rethrow_exception(error);
}

} // namespace lockstep

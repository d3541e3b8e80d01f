// pod_strategy: checks the pod and its device assignment, then starts one
// replica actor per replica on the device of its logical core 0 (its other
// logical cores run parts of it on their device executors,
// strategies/logical_devices.cpp), as
// mirrored_strategy does (strategies/mirrored_devices.hpp), with the pod's
// rules in the shared state (detail::pod_rules).

#include "lockstep/pod_strategy.hpp"

#include "strategies/mirrored_devices.hpp"
#include "strategies/public_state.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

namespace lockstep {

namespace {

/// Refuses a pod of several tasks: TF runs it, this version does not yet.
void check_one_task(const pod_topology& topology, const char* what) {
  const auto tasks = topology.num_tasks();
  if (tasks > 1)
    throw value_error(std::string{"pod_strategy: "} + what + " of " + std::to_string(tasks)
                      + " tasks (hosts) is not supported yet; pod_strategy runs the devices of "
                        "one task, this process's (docs/pod.md)");
}

/// `given`, or TF's TPUStrategy default: one replica of one logical core
/// per device of the pod. Refuses what TF allows but this version does not
/// run yet: several tasks.
device_assignment assignment_for(const pod_topology& topology,
                                 std::optional<device_assignment> given) {
  check_one_task(topology, "a topology");
  if (!given) {
    const mesh_coordinates ones(topology.mesh_rank(), 1);
    return device_assignment::build(topology, ones, ones, topology.num_devices());
  }
  check_one_task(given->topology(), "a device assignment");
  if (given->topology() != topology)
    throw value_error("pod_strategy: the device_assignment is on another topology than the "
                      "strategy's");
  return std::move(*given);
}

std::shared_ptr<detail::strategy_state> make_state(const device_assignment& assignment,
                                                   const pod_options& options) {
  if (options.steps_per_run == 0)
    throw value_error("pod_strategy: steps_per_run must be at least 1, got 0");
  std::vector<device_spec> devices;
  for (std::size_t r = 0; r < assignment.num_replicas(); ++r)
    devices.push_back(assignment.device(r, 0));
  devices = detail::mirrored_devices(std::move(devices));
  const auto timeout = get_runtime_options().timeout;
  auto ops = choose_the_best(devices);
  auto name = "pod_strategy(" + detail::joined_device_names(devices) + ")";
  auto state = detail::public_strategy_state::create(
    std::move(name), {.local_devices = std::move(devices)}, true, std::move(ops), timeout);
  std::vector<std::vector<device_spec>> logical_cores(assignment.num_replicas());
  for (std::size_t r = 0; r < assignment.num_replicas(); ++r)
    for (std::size_t k = 0; k < assignment.num_cores_per_replica(); ++k)
      logical_cores[r].push_back(assignment.device(r, k).canonical());
  state->pod = detail::pod_rules{.host_device = assignment.host_device(0, 0).canonical(),
                                 .steps_per_run = options.steps_per_run,
                                 .logical_cores = std::move(logical_cores)};
  detail::start_replicas(*state);
  return state;
}

} // namespace

pod_strategy::pod_strategy(pod_topology topology,
                           std::optional<lockstep::device_assignment> assignment,
                           pod_options options)
  : pod_strategy(std::make_shared<const lockstep::device_assignment>(
                   assignment_for(topology, std::move(assignment))),
                 options) {}

pod_strategy::pod_strategy(std::shared_ptr<const lockstep::device_assignment> assignment,
                           const pod_options& options)
  : strategy(make_state(*assignment, options)),
    assignment_(std::move(assignment)) {}

std::size_t pod_strategy::num_hosts() const {
  std::set<device_spec> hosts;
  for (std::size_t r = 0; r < assignment_->num_replicas(); ++r)
    hosts.insert(assignment_->host_device(r, 0));
  return hosts.size();
}

std::size_t pod_strategy::num_replicas_per_host() const noexcept {
  const auto per_host = assignment_->topology().num_devices_per_task()
                        / assignment_->num_cores_per_replica();
  return std::min(assignment_->num_replicas(), per_host);
}

std::size_t pod_strategy::steps_per_run() const noexcept {
  return extended().steps_per_run();
}

} // namespace lockstep

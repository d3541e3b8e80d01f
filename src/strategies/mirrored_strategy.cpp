// mirrored_strategy: device list validation with TF's rules, then one
// replica actor per device (actors/strategy_actor.hpp).

#include "lockstep/mirrored_strategy.hpp"

#include "actors/strategy_actor.hpp"
#include "runtime/error_text.hpp"
#include "strategies/mirrored_devices.hpp"
#include "strategies/public_state.hpp"

#include "lockstep/error.hpp"
#include "lockstep/gpu.hpp"
#include "lockstep/runtime_options.hpp"

#include <map>
#include <set>
#include <utility>


namespace lockstep {

namespace {

std::string joined_devices(const std::vector<device_spec>& devices) {
  std::vector<std::string> names;
  for (const auto& d : devices)
    names.push_back(d.to_string());
  return detail::joined_list(names);
}

std::string list_string(const std::vector<device_spec>& devices) {
  return "[" + joined_devices(devices) + "]";
}

/// All (logical) GPUs when built with CUDA and one is visible, else the
/// first CPU.
std::vector<device_spec> default_devices() {
  const int count = gpu_count();
  if (count == 0)
    return {device_spec::parse("/cpu:0")};
  std::vector<device_spec> gpus;
  for (int i = 0; i < count; ++i)
    gpus.push_back(device_spec::parse("/device:GPU:" + std::to_string(i)));
  return gpus;
}

/// TF's `_is_device_list_local`: all local, or all remote with job and task.
bool is_device_list_local(const std::vector<device_spec>& devices) {
  const bool local = devices.front().is_local();
  for (const auto& d : devices) {
    if (local && !d.is_local())
      throw value_error("Local device string cannot have job specified other "
                        "than 'localhost'");
    if (!local && d.is_local())
      throw value_error("Remote device string must have job specified.");
    if (!local && !d.task())
      throw value_error("Remote device string must have task specified.");
  }
  return local;
}

/// TF's `_infer_num_gpus_per_worker` checks for a remote device list, then
/// the in-graph multi-worker rejection.
void check_remote_devices(const std::vector<device_spec>& devices) {
  std::map<std::pair<std::string, int>, std::vector<device_spec>> by_worker;
  for (const auto& d : devices)
    by_worker[{*d.job(), *d.task()}].push_back(d);
  std::optional<std::size_t> gpus;
  for (const auto& [worker, local] : by_worker) {
    std::size_t n = 0;
    for (const auto& d : local)
      n += d.is_gpu() ? 1 : 0;
    if (gpus && *gpus != n)
      throw value_error("All workers should have the same number of GPUs.");
    gpus = n;
    for (const auto& d : local)
      if (d.is_gpu() && static_cast<std::size_t>(d.device_index().value_or(0)) >= n)
        throw value_error("GPU `device_index` on a worker should be consecutive "
                          "and start from 0.");
  }
  if (by_worker.size() > 1)
    throw value_error("In-graph multi-worker training with `mirrored_strategy` "
                      "is not supported.");
}

} // namespace

namespace detail {

std::vector<device_spec> mirrored_devices(std::vector<device_spec> devices) {
  if (devices.empty())
    devices = default_devices();
  const auto requested = devices;
  const bool local = is_device_list_local(devices);
  for (auto& d : devices)
    d = d.canonical();
  if (std::set<device_spec>(devices.begin(), devices.end()).size() != devices.size())
    throw value_error("Duplicate devices in " + list_string(requested)
                      + ", after canonicalization: " + list_string(devices));
  if (!local)
    check_remote_devices(devices);
  if (devices.size() > max_mirrored_replicas)
    throw value_error("mirrored_strategy runs at most " + std::to_string(max_mirrored_replicas)
                      + " replicas (max_mirrored_replicas), got " + std::to_string(devices.size())
                      + " devices");
  return devices;
}

std::string joined_device_names(const std::vector<device_spec>& devices) {
  return joined_devices(devices);
}

void start_replicas(strategy_state& state) {
  state.collectives = cross_device_ops_access::of(*state.ops, state.devices, state.name());
  auto executor = std::make_unique<actors::strategy_actor>(state);
  const auto failure = executor->start_failure();
  state.executor = std::move(executor); // stopped (or kept) with the state
  if (!failure.empty())
    throw resource_error(failure);
}

} // namespace detail

namespace {

std::shared_ptr<detail::strategy_state> make_state(std::vector<device_spec> devices,
                                                   mirrored_options options) {
  devices = detail::mirrored_devices(std::move(devices));
  const auto timeout = detail::checked_timeout(
    options.timeout.value_or(get_runtime_options().timeout), "mirrored_strategy");
  auto ops = options.cross_device_ops ? std::move(options.cross_device_ops)
                                      : choose_the_best(devices);
  auto name = "mirrored_strategy(" + joined_devices(devices) + ")";
  auto state = detail::public_strategy_state::create(
    std::move(name), {.local_devices = std::move(devices)}, true, std::move(ops), timeout);
  detail::start_replicas(*state);
  return state;
}

} // namespace

mirrored_strategy::mirrored_strategy(std::vector<device_spec> devices,
                                     mirrored_options options)
  : strategy(make_state(std::move(devices), std::move(options))) {}

} // namespace lockstep

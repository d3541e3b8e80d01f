// The variable creator: what `variable(...)` makes in each context, with
// TF's validation and naming rules, and the creation rendezvous of replicas.

#include "variables/variable_creation.hpp"

#include "replication/thread_mode.hpp"
#include "variables/variable_state.hpp"

#include "lockstep/error.hpp"

namespace lockstep::detail {

namespace {

thread_local replica_creations* innermost_creations = nullptr;
/// colocate_vars_with: the devices of the innermost guard's variable.
thread_local std::vector<std::vector<device_spec>> colocations;

bool valid(variable_synchronization mode) {
  return static_cast<unsigned>(mode) <= static_cast<unsigned>(variable_synchronization::none);
}

bool valid(variable_aggregation mode) {
  return static_cast<unsigned>(mode)
         <= static_cast<unsigned>(variable_aggregation::only_first_replica);
}

void validate(const variable_options& options, const std::string& name, bool distributed) {
  if (!valid(options.synchronization))
    throw value_error("Invalid variable synchronization mode: "
                      + std::to_string(static_cast<unsigned>(options.synchronization))
                      + " for variable: " + name);
  if (!valid(options.aggregation))
    throw value_error("Invalid variable aggregation mode: "
                      + std::to_string(static_cast<unsigned>(options.aggregation))
                      + " for variable: " + name);
  if (options.synchronization == variable_synchronization::on_read
      && options.trainable.value_or(false))
    throw value_error("Synchronization value can be set to variable_synchronization::on_read "
                      "only for non-trainable variables. You have specified trainable=true "
                      "and synchronization=variable_synchronization::on_read (variable: "
                      + name + ")");
  if (distributed && options.synchronization == variable_synchronization::none)
    throw value_error("`NONE` variable synchronization mode is not supported with "
                      "`mirrored_strategy`. Please change the `synchronization` for variable: "
                      + name);
}

tensor initial_value(std::optional<tensor> given, const variable_options& options,
                     const std::string& name) {
  if (!given) {
    if (!options.initializer)
      throw value_error("initial_value must be specified (variable: " + name + ")");
    given = options.initializer();
  }
  if (options.dtype && given->dtype() != *options.dtype)
    throw dtype_error("variable '" + name + "': the initial value is "
                      + std::string(to_string(given->dtype())) + ", but dtype "
                      + std::string(to_string(*options.dtype)) + " was requested");
  if (options.shape && given->shape() != *options.shape)
    throw shape_error("variable '" + name + "': the initial value has shape "
                      + shape_to_string(given->shape()) + ", but shape "
                      + shape_to_string(*options.shape) + " was requested");
  return std::move(*given);
}

/// A new variable of `strategy` with one copy per device of `devices`, each
/// a copy of `initial` placed on its device.
variable make_variable(strategy_state& strategy, variable_kind kind, const std::string& name,
                       const tensor& initial, const variable_options& options,
                       const std::vector<device_spec>& devices) {
  auto s = std::make_shared<variable_state>();
  s->strategy = strategy.shared_from_this();
  s->kind = kind;
  s->name = name;
  s->type = initial.dtype();
  s->shape = initial.shape();
  s->synchronization = options.synchronization;
  s->aggregation = options.aggregation;
  s->trainable = options.trainable.value_or(options.synchronization
                                            != variable_synchronization::on_read);
  s->devices = devices;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    s->copy_names.push_back(i == 0 ? name : name + "/replica_" + std::to_string(i));
    // Several copies: each device's executor applies its copy's writes.
    auto* executor = devices.size() > 1 ? &strategy.device_executor(devices[i]) : nullptr;
    s->copies.push_back(std::make_shared<detail::variable_copy>(
      s->copy_names.back(), i, initial.to(devices[i]), executor));
  }
  return variable_access::make(std::move(s), std::nullopt);
}

variable make_distributed(strategy_state& strategy, const std::string& name,
                          const tensor& initial, const variable_options& options) {
  const auto kind = options.synchronization == variable_synchronization::on_read
                      ? variable_kind::sync_on_read
                      : variable_kind::mirrored;
  // colocate_vars_with only accepts variables of this strategy, whose
  // copies are on the strategy's devices, so copy i stays replica i's.
  const auto& devices = colocations.empty() ? strategy.devices : colocations.back();
  if (strategy.services) // every worker starts from the chief's value
    return make_variable(strategy, kind, name,
                         strategy.services->initial_value_from_chief(initial, name), options,
                         devices);
  return make_variable(strategy, kind, name, initial, options, devices);
}

} // namespace

replica_creations*& current_replica_creations() noexcept {
  return innermost_creations;
}

void creation_rendezvous::publish(const variable& var) {
  {
    std::lock_guard<std::mutex> lock{mutex_};
    created_.push_back(var);
  }
  changed_.notify_all();
}

void creation_rendezvous::set_first_replica_paused(bool paused) {
  bool waiters;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    paused_ = paused;
    waiters = waiting_ > 0;
  }
  if (waiters) // on every merge_call: skip the notify when nobody waits
    changed_.notify_all();
}

variable creation_rendezvous::await(std::size_t index, const std::string& name,
                                    const std::string& device, time_point deadline) {
  std::unique_lock<std::mutex> lock{mutex_};
  ++waiting_;
  const bool ready
    = changed_.wait_until(lock, deadline, [&] { return created_.size() > index || paused_; });
  --waiting_;
  if (!ready)
    throw timeout_error("variable '" + name + "' on " + device
                        + ": replica 0 created no variable at creation index "
                        + std::to_string(index) + " in time");
  if (created_.size() <= index
      || canonical_variable_name(created_[index].name()) != canonical_variable_name(name))
    throw context_error("Tried to create variable " + name + " with mismatching name on device "
                        + device);
  return created_[index];
}

variable create_variable(std::optional<tensor> given, variable_options options) {
  const auto name = options.name.empty() ? std::string{"Variable"} : options.name;
  const auto* mode = current_mode();
  auto& strategy = mode == nullptr ? default_strategy_state() : *mode->strategy;
  const bool distributed = strategy.replicated;
  validate(options, name, distributed);
  auto* creations = current_replica_creations();
  if (distributed && mode->replica != nullptr && creations != nullptr) {
    const auto index = creations->next_index++;
    if (creations->replica > 0)
      return creations->rendezvous->await(index, name,
                                          strategy.devices[creations->replica].to_string(),
                                          std::chrono::steady_clock::now() + strategy.timeout);
    auto var = make_distributed(strategy, name, initial_value(std::move(given), options, name),
                                options);
    creations->rendezvous->publish(var);
    return var;
  }
  auto initial = initial_value(std::move(given), options, name);
  if (distributed)
    return make_distributed(strategy, name, initial, options);
  // The default strategy keeps the caller's device, or the device of
  // colocate_vars_with's variable (TF's colocate_with); one_device_strategy
  // its own.
  const auto device = !strategy.devices.empty() ? strategy.devices[0]
                      : colocations.empty()     ? current_device().canonical()
                                                : colocations.back().front();
  return make_variable(strategy, variable_kind::plain, name, initial, options, {device});
}

void push_colocation(std::vector<device_spec> devices) {
  colocations.push_back(std::move(devices));
}

void pop_colocation() noexcept {
  colocations.pop_back();
}

} // namespace lockstep::detail

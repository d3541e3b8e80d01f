// update() and update_non_slot(): an update is one write, posted to every
// copy of the variable and applied by each copy's actor on its device's
// executor inside an update context. (strategy_extended's other variable
// methods are the strategies': src/strategies/strategy_variables.cpp.)

#include "lockstep/update.hpp"

#include "runtime/completion.hpp"
#include "replication/thread_mode.hpp"
#include "variables/variable_creation.hpp"
#include "variables/variable_state.hpp"

#include "lockstep/error.hpp"

#include <algorithm>

namespace lockstep::detail {

namespace {

/// An update function as a variable write. It holds its variable weakly:
/// writes still queued for a variable nobody holds any more are dropped.
/// `posted`: nobody waits for it, so its failure is also kept for
/// `synchronize()`.
class function_write final : public detail::variable_write {
public:
  function_write(std::shared_ptr<update_function> fn, std::weak_ptr<variable_state> var,
                 bool posted)
    : fn_(std::move(fn)), var_(std::move(var)), posted_(posted) {}

  void apply(std::size_t copy, tensor& value) const override {
    auto var = var_.lock();
    if (!var)
      return;
    try {
      update_context_guard context{*var->strategy, copy};
      device_scope placement{var->devices[copy]};
      const variable component = variable_access::make(var, copy);
      fn_->call(copy, &value, &component);
    } catch (...) {
      if (posted_)
        var->strategy->record_write_failure(std::current_exception());
      throw;
    }
  }

private:
  std::shared_ptr<update_function> fn_;
  std::weak_ptr<variable_state> var_;
  bool posted_;
};

void check_own_variable(const strategy_state& state, const variable& var, const char* what) {
  if (var.state().strategy.get() != &state)
    throw value_error(std::string{what} + ": variable '" + var.name() + "' was created by "
                      + var.state().strategy->name() + ", not by " + state.name());
}

std::size_t device_index(const strategy_state& state, const device_spec& device) {
  const auto wanted = device.canonical();
  for (std::size_t i = 0; i < state.devices.size(); ++i)
    if (state.devices[i] == wanted)
      return i;
  if (state.devices.empty())
    return 0; // the default strategy runs where it is called
  throw value_error("update_non_slot: " + wanted.to_string() + " is not a device of "
                    + state.name());
}

} // namespace

std::size_t copies_of(const variable& var) {
  return var.state().copies.size();
}

void throw_not_mirrored(const std::string& value) {
  throw type_error("Expected value to be mirrored across replicas: " + value + " in update.");
}

void post_update(strategy_state& state, const variable& var,
                 std::shared_ptr<update_function> fn, bool wait) {
  check_own_variable(state, var, "update");
  if (var.is_component())
    throw value_error("update: '" + var.name() + "' is one copy of a variable; pass the "
                      "variable itself (value_container)");
  auto& s = var.state();
  s.check_failures();
  // One copy applies on this thread: its failure is known at once.
  wait = wait || s.copies.size() == 1;
  const auto seq
    = s.post(std::make_shared<function_write>(std::move(fn), s.weak_from_this(), !wait));
  if (wait)
    s.check_write(seq);
}

void run_non_slot(strategy_state& state, const std::vector<device_spec>& devices,
                  std::shared_ptr<update_function> fn) {
  if (devices.empty())
    throw value_error("update_non_slot: no devices");
  // The pod strategy's host (its non_slot_devices) need not run a replica:
  // fn runs there once, on the calling thread in cross-replica context, as
  // TF's TPUStrategy runs it on its host.
  if (state.pod && devices.size() == 1 && devices[0].canonical() == state.pod->host_device
      && std::find(state.devices.begin(), state.devices.end(), state.pod->host_device)
           == state.devices.end()) {
    mode_guard mode{{&state, nullptr}};
    device_scope placement{state.pod->host_device};
    fn->call(0, nullptr, nullptr);
    return;
  }
  std::vector<std::size_t> indices;
  for (const auto& d : devices)
    indices.push_back(device_index(state, d));
  if (state.devices.size() <= 1) { // one device: run here, placed on it
    for (std::size_t i = 0; i < indices.size(); ++i) {
      update_context_guard context{state, indices[i]};
      device_scope placement{state.devices.empty() ? devices[i] : state.devices[indices[i]]};
      fn->call(i, nullptr, nullptr);
    }
    return;
  }
  auto done = std::make_shared<completion>(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i)
    state.device_executor(indices[i]).post([&state, fn, done, i, copy = indices[i]] {
      std::exception_ptr error;
      try {
        update_context_guard context{state, copy};
        device_scope placement{state.devices[copy]};
        fn->call(i, nullptr, nullptr);
      } catch (...) {
        error = std::current_exception();
      }
      done->done(std::move(error));
    });
  if (!done->wait(std::chrono::steady_clock::now() + state.timeout))
    throw timeout_error("update_non_slot did not finish on every device within "
                        + std::to_string(state.timeout.count()) + " ms");
  if (auto error = done->error())
    std::rethrow_exception(error);
}

} // namespace lockstep::detail

// The strategy API over the variables below it: variable::strategy(), a
// mirrored variable's write in replica context (its merge_call), and
// strategy_extended's variable methods that are not updates (read_var,
// non_slot_devices, colocate_vars_with, variable_created_in_scope,
// synchronize; src/variables/variable_updates.cpp posts the updates).

#include "lockstep/context.hpp"
#include "lockstep/replica_context.hpp"
#include "lockstep/strategy.hpp"

#include "replication/thread_mode.hpp"
#include "strategies/public_state.hpp"
#include "variables/variable_creation.hpp"
#include "variables/variable_state.hpp"

#include "lockstep/error.hpp"

#include <algorithm>

namespace lockstep::detail {

void public_strategy_state::merge_write(const variable& whole, std::optional<reduce_op> reduce,
                                        const tensor& value, merged_write post) {
  get_replica_context()->merge_call(
    [whole, reduce, post = std::move(post)](lockstep::strategy& st,
                                            const per_replica<tensor>& values) {
      auto& ext = st.extended();
      const auto reduced = reduce ? ext.reduce_to(*reduce, values, whole)
                                  : ext.broadcast_to(values.primary(), whole);
      post(whole, reduced.values());
    },
    value);
}

} // namespace lockstep::detail

namespace lockstep {

lockstep::strategy variable::strategy() const {
  return detail::strategy_handle(*state_->strategy);
}

colocation_guard::~colocation_guard() {
  if (pushed_)
    detail::pop_colocation();
}

tensor strategy_extended::read_var(const variable& var) const {
  detail::require_cross_replica_or_default_context(*state_);
  return var.container().value();
}

std::vector<device_spec>
strategy_extended::non_slot_devices(const std::vector<variable>& vars) const {
  if (state_->pod)
    return {state_->pod->host_device};
  if (state_->replicated)
    return state_->devices;
  if (vars.empty())
    throw value_error("non_slot_devices: no variables");
  const auto first = std::min_element(vars.begin(), vars.end(),
    [](const variable& a, const variable& b) { return a.name() < b.name(); });
  return first->devices();
}

colocation_guard strategy_extended::colocate_vars_with(const variable& var) const {
  if (var.state().strategy.get() != state_)
    throw value_error("`colocate_vars_with` must only be passed a variable created in this "
                      "lockstep::strategy.scope(), not: " + var.name());
  detail::push_colocation(var.devices());
  return colocation_guard{true};
}

bool strategy_extended::variable_created_in_scope(const variable& var) const {
  return var.state().strategy.get() == state_;
}

void strategy_extended::synchronize() const {
  state_->drain_device_executors();
  if (auto error = state_->take_write_failure())
    std::rethrow_exception(error);
}

} // namespace lockstep

// multi_step_context: the outputs of a multi-step loop.
//
// How it works: before the one dispatch of a loop, the context gives each
// replica a slot. A setter called in replica context finds the replica's id
// through get_replica_context() and writes only that replica's slot, so the
// replica threads never share a write. A setter called in cross-replica
// context (a merge function, while every replica waits in merge_call, or
// the caller) writes the shared outputs directly. After the dispatch, on the
// calling thread, end_loop checks that every replica set the same names
// with the same ops and reduces each name's last values once.

#include "lockstep/multi_step.hpp"

#include "lockstep/context.hpp"
#include "lockstep/error.hpp"
#include "lockstep/strategy.hpp"

#include "strategies/public_state.hpp"

#include <atomic>
#include <set>
#include <utility>

namespace lockstep::detail {

/// What one replica recorded in the loop.
struct replica_slot {
  std::map<std::string, std::pair<tensor, reduce_op>> last_step_outputs;
  std::map<std::string, std::any> non_tensor_outputs;
};

enum class loop_phase : int { before, running, after, failed };

struct multi_step_state {
  explicit multi_step_state(strategy_state& s) : strategy(&s) {}

  strategy_state* strategy;
  std::map<std::string, multi_step_context::output> last_step_outputs;
  std::map<std::string, std::vector<std::any>> non_tensor_outputs;
  /// One per replica, written only by its replica's thread while running.
  std::vector<replica_slot> slots;
  std::size_t steps = 0;
  /// Atomic: a replica left running by a timed-out loop may read it while
  /// the caller marks the loop failed.
  std::atomic<loop_phase> phase{loop_phase::before};
};

void check_iterations(std::size_t iterations) {
  if (iterations == 0)
    throw value_error("experimental_run_steps_on_iterator: iterations must be at least 1, got 0");
}

void check_host_loop_shapes(const strategy_state& state,
                            std::optional<std::int64_t> static_batch_size) {
  // TF's TPUStrategy checks its iterator's output shapes before the loop:
  // a batch dimension that may be partial is not fully defined.
  if (state.pod && !static_batch_size)
    throw value_error("pod currently requires fully defined shapes. Either use set_shape() on "
                      "the input tensors or use dataset.batch(..., drop_remainder=True).");
}

} // namespace lockstep::detail

namespace lockstep {

namespace {

using detail::loop_phase;

void require_usable(const detail::multi_step_state& state, const char* what) {
  if (state.phase.load() == loop_phase::failed)
    throw context_error(std::string{"multi_step_context::"} + what
                        + ": the loop of this context threw; its outputs are incomplete");
}

/// The calling replica's slot when the caller is a replica of this loop;
/// nullptr in cross-replica context. context_error in any other replica
/// context (another strategy's, or this strategy's outside the loop).
detail::replica_slot* replica_slot_of_caller(detail::multi_step_state& state,
                                             const char* what) {
  auto* ctx = get_replica_context();
  if (ctx == nullptr)
    return nullptr;
  if (&ctx->state() != state.strategy || state.phase.load() != loop_phase::running)
    throw context_error(std::string{"multi_step_context::"} + what
                        + " in replica context needs to be called by the step function of "
                          "its experimental_run_steps_on_iterator loop");
  const auto r = detail::replica_id(*ctx); // this worker's slots
  if (r >= state.slots.size())
    throw context_error(std::string{"multi_step_context::"} + what + ": replica "
                        + std::to_string(r) + " out of range for a loop of "
                        + std::to_string(state.slots.size()) + " replicas");
  return &state.slots[r];
}

reduce_op required_op(const std::string& name, std::optional<reduce_op> op) {
  // TF: `assert reduce_op is not None` before the merge_call.
  if (!op)
    throw value_error("assert reduce_op is not None: set_last_step_output('" + name
                      + "') in replica context needs a reduce op");
  return *op;
}

/// The op of a last-step output set in replica context. TF reduces it in a
/// merge_call inside the pod's replicated computation, where TF's TPU rule
/// allows SUM and MEAN only (context_error, as strategy_extended::reduce_to
/// inside `run`).
reduce_op replica_op(const detail::multi_step_state& state, const std::string& name,
                     std::optional<reduce_op> op) {
  const auto chosen = required_op(name, op);
  detail::check_pod_reduce_op(*state.strategy, chosen);
  return chosen;
}

} // namespace

multi_step_context::multi_step_context(detail::strategy_state& state,
                                       std::map<std::string, tensor> initial_loop_values)
  : state_(std::make_shared<detail::multi_step_state>(state)) {
  for (auto& [name, value] : initial_loop_values)
    state_->last_step_outputs.insert_or_assign(name, output{std::move(value)});
}

void multi_step_context::set_last_step_output(const std::string& name, const tensor& value,
                                              std::optional<reduce_op> op) {
  auto& state = *state_;
  require_usable(state, "set_last_step_output");
  if (auto* slot = replica_slot_of_caller(state, "set_last_step_output")) {
    slot->last_step_outputs.insert_or_assign(name, std::pair{value, replica_op(state, name, op)});
    return;
  }
  if (op)
    state.last_step_outputs.insert_or_assign(name, output{detail::strategy_handle(*state.strategy).reduce(*op, value)});
  else
    state.last_step_outputs.insert_or_assign(name, output{value});
}

void multi_step_context::set_last_step_output(const std::string& name,
                                              const per_replica<tensor>& value,
                                              std::optional<reduce_op> op) {
  auto& state = *state_;
  require_usable(state, "set_last_step_output");
  if (auto* slot = replica_slot_of_caller(state, "set_last_step_output")) {
    // A replica records its own component.
    const auto r = static_cast<std::size_t>(slot - state.slots.data());
    slot->last_step_outputs.insert_or_assign(name,
                                             std::pair{value[r], replica_op(state, name, op)});
    return;
  }
  if (op)
    state.last_step_outputs.insert_or_assign(name, output{detail::strategy_handle(*state.strategy).reduce(*op, value)});
  else
    state.last_step_outputs.insert_or_assign(name, output{value});
}

void multi_step_context::set_non_tensor_output(const std::string& name, std::any value) {
  auto& state = *state_;
  require_usable(state, "set_non_tensor_output");
  if (auto* slot = replica_slot_of_caller(state, "set_non_tensor_output")) {
    slot->non_tensor_outputs.insert_or_assign(name, std::move(value));
    return;
  }
  state.non_tensor_outputs.insert_or_assign(name, std::vector<std::any>{std::move(value)});
}

const std::map<std::string, multi_step_context::output>&
multi_step_context::last_step_outputs() const {
  require_usable(*state_, "last_step_outputs");
  return state_->last_step_outputs;
}

const std::map<std::string, std::vector<std::any>>&
multi_step_context::non_tensor_outputs() const {
  require_usable(*state_, "non_tensor_outputs");
  return state_->non_tensor_outputs;
}

std::size_t multi_step_context::steps() const noexcept {
  return state_->steps;
}

void multi_step_context::begin_loop(std::size_t steps, std::size_t replicas) {
  auto& state = *state_;
  state.steps = steps;
  state.slots.assign(replicas, detail::replica_slot{});
  state.phase.store(loop_phase::running);
}

namespace {

/// The first replica (in replica order) that set `name`; value_error naming
/// the first replica that did not set it. `same_op` checks each replica's
/// entry against the first's.
template <class Entry, class SameOp>
std::size_t check_all_set(const detail::strategy_state& strategy,
                          const std::vector<detail::replica_slot>& slots,
                          const std::string& name, const char* kind, Entry entry,
                          SameOp same_op) {
  std::size_t first = slots.size();
  for (std::size_t r = 0; r < slots.size() && first == slots.size(); ++r)
    if (entry(slots[r]) != nullptr)
      first = r;
  for (std::size_t r = 0; r < slots.size(); ++r) {
    const auto* mine = entry(slots[r]);
    if (mine == nullptr)
      throw value_error("multi_step_context: " + detail::describe_replica(strategy, r)
                        + " did not set " + kind + " '" + name + "', which "
                        + detail::describe_replica(strategy, first) + " set");
    same_op(r, first, *mine, *entry(slots[first]));
  }
  return first;
}

/// end_loop's work: checks the replicas' slots and moves their outputs,
/// reduced, into the shared outputs.
void collect_replica_outputs(detail::multi_step_state& state) {
  using output = multi_step_context::output;
  const auto& strategy = *state.strategy;
  const auto& slots = state.slots;
  // Every name any replica set.
  std::set<std::string> names;
  std::set<std::string> non_tensor_names;
  for (const auto& slot : slots) {
    for (const auto& kv : slot.last_step_outputs)
      names.insert(kv.first);
    for (const auto& kv : slot.non_tensor_outputs)
      non_tensor_names.insert(kv.first);
  }
  for (const auto& name : names) {
    const auto first = check_all_set(
      strategy, slots, name, "last step output",
      [&](const detail::replica_slot& s) -> const std::pair<tensor, reduce_op>* {
        auto i = s.last_step_outputs.find(name);
        return i == s.last_step_outputs.end() ? nullptr : &i->second;
      },
      [&](std::size_t r, std::size_t q, const std::pair<tensor, reduce_op>& mine,
          const std::pair<tensor, reduce_op>& theirs) {
        if (mine.second != theirs.second)
          throw value_error("multi_step_context: " + detail::describe_replica(strategy, r)
                            + " set last step output '" + name + "' with reduce op "
                            + std::string{to_string(mine.second)} + " but "
                            + detail::describe_replica(strategy, q) + " with "
                            + std::string{to_string(theirs.second)});
      });
    std::vector<tensor> values;
    values.reserve(slots.size());
    for (const auto& slot : slots)
      values.push_back(slot.last_step_outputs.at(name).first);
    const auto op = slots[first].last_step_outputs.at(name).second;
    state.last_step_outputs.insert_or_assign(
      name, output{detail::strategy_handle(*state.strategy).reduce(op, per_replica<tensor>{std::move(values)})});
  }
  for (const auto& name : non_tensor_names) {
    check_all_set(
      strategy, slots, name, "non-tensor output",
      [&](const detail::replica_slot& s) -> const std::any* {
        auto i = s.non_tensor_outputs.find(name);
        return i == s.non_tensor_outputs.end() ? nullptr : &i->second;
      },
      [](std::size_t, std::size_t, const std::any&, const std::any&) {});
    std::vector<std::any> values;
    values.reserve(slots.size());
    for (const auto& slot : slots)
      values.push_back(slot.non_tensor_outputs.at(name));
    state.non_tensor_outputs.insert_or_assign(name, std::move(values));
  }
}

} // namespace

void multi_step_context::end_loop() {
  require_usable(*state_, "end_loop");
  try {
    collect_replica_outputs(*state_);
  } catch (...) {
    fail(); // the outputs are half collected
    throw;
  }
  state_->slots.clear();
  state_->phase.store(loop_phase::after);
}

void multi_step_context::fail() noexcept {
  state_->phase.store(loop_phase::failed);
}

} // namespace lockstep

#pragma once

// Multi-step loops (TF's MultiStepContext and run_steps_on_iterator): a
// step function run K times on every replica in one dispatch, and the
// outputs of its last step. `strategy_extended::experimental_run_steps_on_iterator`
// (strategy.hpp) makes and returns the context; this header has the type.

#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"

#include <any>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace lockstep {

namespace detail {

struct strategy_state;
struct multi_step_state;

} // namespace detail

class strategy_extended;

/// TF's MultiStepContext: what a step function of
/// `strategy_extended::experimental_run_steps_on_iterator` records for the
/// caller, and what the caller reads after the loop.
///
/// A handle: copies refer to the same context. The step function receives
/// it by reference on every replica thread at once; the setters are safe to
/// call there (each replica writes only its own slot). The readers are for
/// the caller after the loop.
class multi_step_context {
public:
  /// A last-step output: a reduced tensor, or one tensor per replica.
  using output = std::variant<tensor, per_replica<tensor>>;

  /// Records `value` as output `name`.
  ///
  /// In replica context (inside the step function) `op` is required
  /// (value_error "assert reduce_op is not None" otherwise): each replica
  /// records its value for this step; after the loop the values of the last
  /// step that set `name` are reduced once with `strategy::reduce(op, ...)`
  /// into one tensor. Every replica must set the same names with the same
  /// op (value_error naming the replica otherwise). On the pod strategy the
  /// op must be SUM or MEAN (TF's TPU rule inside the replicated
  /// computation: context_error "Currently only support sum & mean in
  /// pod_strategy.").
  ///
  /// In cross-replica context (e.g. in a merge_call's merge function within
  /// a step) the value is stored as given: reduced with `strategy::reduce`
  /// when `op` is set, else kept (a per_replica stays per_replica, a plain
  /// tensor stays a tensor). A name set in replica context during the loop
  /// takes the replicas' reduced value at the end of the loop.
  void set_last_step_output(const std::string& name, const tensor& value,
                            std::optional<reduce_op> op = std::nullopt);
  void set_last_step_output(const std::string& name, const per_replica<tensor>& value,
                            std::optional<reduce_op> op = std::nullopt);

  /// Records a value of any type as output `name`. In replica context each
  /// replica records its own; after the loop the name holds one value per
  /// replica, in replica order (TF stores experimental_local_results).
  /// In cross-replica context the name holds the one value given.
  void set_non_tensor_output(const std::string& name, std::any value);

  /// After the loop: each name's output, a reduced tensor or an unreduced
  /// per_replica<tensor>; starts as the loop's initial values.
  const std::map<std::string, output>& last_step_outputs() const;

  /// After the loop: each name's values (one per replica when set in
  /// replica context).
  const std::map<std::string, std::vector<std::any>>& non_tensor_outputs() const;

  /// How many steps the call ran: fewer than asked when the iterator
  /// ended, 0 when it had already ended.
  std::size_t steps() const noexcept;

private:
  // -- for the library's internals ---------------------------------------------

  /// experimental_run_steps_on_iterator makes the context and drives the loop.
  friend class strategy_extended;

  /// A context for a loop of `state`'s replicas; last_step_outputs() starts
  /// as `initial_loop_values`.
  multi_step_context(detail::strategy_state& state,
                     std::map<std::string, tensor> initial_loop_values);

  /// Called on the calling thread before the dispatch of a loop of `steps`
  /// steps over `replicas` replicas: gives each replica its own slot.
  void begin_loop(std::size_t steps, std::size_t replicas);

  /// Called on the calling thread after every replica returned: checks that
  /// the replicas set the same names with the same ops, and reduces each
  /// name's last-step values once.
  void end_loop();

  /// Called when the loop threw: the context can no longer be used
  /// (context_error from its methods).
  void fail() noexcept;

  std::shared_ptr<detail::multi_step_state> state_;
};

} // namespace lockstep

// strategy and strategy_extended: the cross-replica API shared by every
// strategy. What differs between strategies is the executor (who runs the
// replicas) and whether reductions are identities (one replica).

#include "lockstep/strategy.hpp"

#include "runtime/error_text.hpp"
#include "runtime/spin_wait.hpp"
#include "runtime/timeline.hpp"
#include "strategies/flight_dump.hpp"
#include "strategies/public_state.hpp"
#include "replication/thread_mode.hpp"

#include "runtime/log.hpp"

#include "lockstep/context.hpp"
#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <algorithm>
#include <mutex>
#include <thread>
#include <optional>

#include <sstream>

namespace lockstep::detail {

namespace {

/// `fn` as the timeline sees it: each replica's events belong to the
/// call's steps (from `first_step`), and its `run` span lasts from the
/// broadcast (now) to its return.
std::shared_ptr<const replica_function> traced(const strategy_state& state,
                                               std::shared_ptr<const replica_function> fn,
                                               std::int64_t first_step) {
  return std::make_shared<const replica_function>(
    [&state, fn = std::move(fn), first_step,
     dispatched = timeline_now()](replica_context& ctx) -> std::any {
      const auto rank = state.topology.global_replica_id(replica_id(ctx));
      const auto track = timeline_track(track_kind::replica, static_cast<std::uint32_t>(rank));
      timeline_set_thread_step(first_step);
      struct on_return {
        std::uint32_t track;
        std::int64_t first_step;
        std::int64_t dispatched;
        ~on_return() {
          timeline_set_thread_step(first_step); // the span belongs to the first step
          timeline_span(track, "run", "replica", dispatched, timeline_now());
          timeline_set_thread_step(-1);
        }
      } recorded{track, first_step, dispatched};
      return (*fn)(ctx);
    });
}

} // namespace

std::vector<std::any>
call_for_each_replica(strategy_state& state,
                      std::shared_ptr<const replica_function> fn,
                      const run_options& options, std::size_t steps) {
  auto scope = strategy_handle(state).scope(); // checks the context as TF's run does
  if (!state.is_default() && !state.dumped.load(std::memory_order_relaxed)
      && !state.dumped.exchange(true, std::memory_order_relaxed))
    register_for_dumps(state.shared_from_this());
  if (timeline_on())
    fn = traced(state, std::move(fn), timeline_begin_steps(static_cast<std::int64_t>(steps)));
  const auto timeout = checked_timeout(options.timeout.value_or(state.timeout), "run_options");
  // The default strategy is every thread's; the others serve one at a time.
  std::optional<user_claim> claim;
  if (!state.is_default())
    claim.emplace(state);
  state.dispatches.fetch_add(1, std::memory_order_relaxed);
  return state.executor->run(std::move(fn), timeout);
}

void check_pod_reduce_op(const strategy_state& state, reduce_op op) {
  if (state.pod && op != reduce_op::sum && op != reduce_op::mean)
    throw context_error("Currently only support sum & mean in pod_strategy.");
}

void throw_non_distributed(reduce_op op, const std::string& value) {
  throw value_error("A non-distributed value " + value
                    + " cannot be reduced with the given reduce op " + std::string{to_string(op)}
                    + ".");
}

std::vector<device_spec> replica_devices(const strategy_state& state) {
  if (state.is_default())
    return {current_device()};
  return state.devices;
}

input_context worker_input_context(const strategy_state& state) {
  const auto& topology = state.topology;
  return input_context{topology.workers, topology.worker_index, topology.replicas()};
}

worker_sum input_worker_sum(const strategy_state& state) {
  return state.sum_over_workers();
}

strategy strategy_handle(strategy_state& state) {
  return strategy_access::make(state.shared_from_this());
}

std::shared_ptr<strategy_state>
public_strategy_state::create(std::string name, detail::topology topology, bool replicated,
                              std::shared_ptr<cross_device_ops> ops,
                              std::chrono::milliseconds timeout, bool records) {
  return strategy_state::share(std::make_unique<public_strategy_state>(
                                 std::move(name), std::move(topology), replicated,
                                 std::move(ops), timeout),
                               records);
}

std::size_t replica_id(const replica_context& ctx) {
  return replica_context_access::local_id(ctx);
}

void throw_structure_mismatch(std::size_t replica, const std::string& what,
                              const std::string& first) {
  throw value_error("regroup: replica " + std::to_string(replica) + " returned "
                    + what + " but replica 0 returned " + first);
}

} // namespace lockstep::detail

namespace lockstep {

namespace {

bool single_replica(const detail::strategy_state& state) {
  return !state.replicated;
}

std::string describe(const tensor& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

/// TF's TPUStrategy reduces a distributed value to one device outside its
/// replicated computation; inside it (merge functions, all_reduce), onto
/// the replicas' devices as the other strategies do.
void check_pod_destinations(const detail::strategy_state& state,
                            const destinations& destination) {
  if (state.pod && destination.devices().size() > 1 && !detail::in_dispatch(state))
    throw value_error("Multiple devices are not supported for pod_strategy");
}

/// TF's TPUExtended._reduce_to inside its replicated computation (a merge
/// function within `run`): SUM and MEAN only. MEAN keeps its exact mean
/// (the sum divided by the count), where TF multiplies by 1 / replicas.
void check_pod_reduce_op_in_run(const detail::strategy_state& state, reduce_op op) {
  if (state.pod && detail::in_dispatch(state))
    detail::check_pod_reduce_op(state, op);
}

} // namespace

// -- scope_guard ------------------------------------------------------------------

scope_guard::~scope_guard() {
  if (pushed_)
    detail::pop_mode();
}

// -- strategy ----------------------------------------------------------------------

scope_guard strategy::scope() const {
  auto& state = *state_;
  if (has_strategy()) {
    if (state.is_default())
      throw context_error("Must not nest lockstep::strategy scopes.");
    detail::require_cross_replica_or_default_context(state);
    return scope_guard{false}; // already in this strategy's scope
  }
  detail::push_mode({&state, nullptr});
  return scope_guard{true};
}

tensor strategy::reduce_tensor(reduce_op op, const per_replica<tensor>& value) const {
  detail::require_cross_replica_or_default_context(*state_);
  return extended().reduce_to(op, value, current_device())[0];
}

tensor strategy::reduce(reduce_op op, const tensor& value) const {
  detail::require_cross_replica_or_default_context(*state_);
  return extended().reduce_to(op, value, current_device())[0];
}

tensor strategy::reduce(reduce_op op, const per_replica<tensor>& value,
                        std::int64_t axis) const {
  detail::require_cross_replica_or_default_context(*state_);
  if (op != reduce_op::sum && op != reduce_op::mean)
    throw value_error("reduce along an axis supports sum and mean, not "
                      + std::string{lockstep::to_string(op)});
  std::vector<tensor> sums;
  std::int64_t length = 0;
  for (const auto& part : value.values()) {
    const auto rank = static_cast<std::int64_t>(part.rank());
    if (axis >= rank || axis + rank < 0)
      throw value_error("`axis` = " + std::to_string(axis)
                        + " out of range for `value` with rank "
                        + std::to_string(rank));
    const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
    length += part.shape()[a];
    sums.push_back(reduce_sum_axis(part, a));
  }
  auto total = reduce_tensor(reduce_op::sum, per_replica<tensor>{std::move(sums)});
  if (op == reduce_op::sum)
    return total;
  if (length == 0 && is_integer(total.dtype()))
    throw value_error("cannot take the mean of an integer tensor over an empty axis");
  divide_into(total, length);
  return total;
}

std::size_t strategy::num_replicas_in_sync() const noexcept {
  return extended().num_replicas_in_sync();
}

strategy_extended& strategy::extended() const noexcept {
  return detail::public_state(*state_).extended;
}

std::string strategy::to_string() const {
  return state_->name();
}

// -- strategy_extended -----------------------------------------------------------

std::size_t strategy_extended::num_replicas_in_sync() const noexcept {
  return state_->replicated ? state_->topology.replicas() : 1;
}

void strategy_extended::check_reduce_non_distributed(
  const destinations& destination) const {
  detail::require_cross_replica_or_default_context(*state_);
  if (destination.devices().empty())
    throw value_error("destinations can not be empty");
}

mirrored<tensor> strategy_extended::reduce_to(reduce_op op,
                                              const per_replica<tensor>& value,
                                              const destinations& destination) const {
  detail::require_cross_replica_or_default_context(*state_);
  check_pod_reduce_op_in_run(*state_, op);
  check_pod_destinations(*state_, destination);
  // TF's regroup would have collapsed it into a plain value. Across
  // workers every component counts (TF's CollectiveAllReduceExtended).
  if (value.is_single() && !spans_workers())
    return reduce_to(op, value.primary(), destination);
  return state_->ops->reduce(op, value, destination);
}

bool strategy_extended::spans_workers() const noexcept {
  return state_->topology.workers > 1;
}

mirrored<tensor> strategy_extended::reduce_to(reduce_op op, const tensor& value,
                                              const destinations& destination) const {
  check_reduce_non_distributed(destination);
  check_pod_reduce_op_in_run(*state_, op);
  // Across workers, each worker's value is reduced with the others' (as
  // TF's multi-worker strategy does), as one component per worker.
  if (spans_workers())
    return state_->ops->reduce(op, per_replica<tensor>{std::vector<tensor>{value}}, destination);
  // N copies of the value: its MEAN, MIN and MAX are the value itself.
  if ((op == reduce_op::sum || op == reduce_op::prod) && num_replicas_in_sync() != 1)
    detail::throw_non_distributed(op, describe(value));
  return broadcast_to(value, destination);
}

std::vector<mirrored<tensor>>
strategy_extended::batch_reduce_to(reduce_op op,
                                   const std::vector<reduce_pair>& pairs) const {
  detail::require_cross_replica_or_default_context(*state_);
  check_pod_reduce_op_in_run(*state_, op);
  for (const auto& p : pairs)
    check_pod_destinations(*state_, p.destination);
  const bool any_single = std::any_of(pairs.begin(), pairs.end(),
                                      [](const reduce_pair& p) { return p.value.is_single(); });
  if (!any_single)
    return state_->ops->batch_reduce(op, pairs);
  std::vector<mirrored<tensor>> out;
  for (const auto& p : pairs)
    out.push_back(reduce_to(op, p.value, p.destination));
  return out;
}

mirrored<tensor> strategy_extended::broadcast_to(const tensor& value,
                                                 const destinations& destination) const {
  check_reduce_non_distributed(destination);
  if (single_replica(*state_))
    return mirrored<tensor>{{value}}; // TF: one device broadcasts to itself
  return state_->ops->broadcast(value, destination);
}

const std::vector<device_spec>& strategy_extended::worker_devices() const {
  if (state_->is_default())
    throw context_error("worker_devices() method unsupported by default_strategy.");
  return state_->devices;
}

const std::vector<device_spec>& strategy_extended::parameter_devices() const {
  if (state_->is_default())
    throw context_error("parameter_devices() method unsupported by default_strategy.");
  return state_->devices;
}

// TF's rules: single-process strategies are in-graph and their one worker
// initialises, saves and writes summaries; with several workers the
// strategy is between-graph, every worker initialises, and only the chief
// saves checkpoints and summaries.
bool strategy_extended::experimental_between_graph() const noexcept {
  return state_->topology.workers > 1;
}

bool strategy_extended::experimental_should_init() const noexcept {
  return true;
}

bool strategy_extended::should_checkpoint() const noexcept {
  return state_->topology.is_chief;
}

bool strategy_extended::should_save_summary() const noexcept {
  return state_->topology.is_chief;
}

cross_device_ops& strategy_extended::cross_device_ops() const {
  return *state_->ops;
}

std::string strategy_extended::collective_flight_record() const {
  const auto& communicator = state_->collectives.communicator;
  return communicator ? communicator->session().dump() : std::string{};
}

std::size_t strategy_extended::steps_per_run() const noexcept {
  return state_->pod ? state_->pod->steps_per_run : 1;
}

std::chrono::milliseconds strategy_extended::timeout() const noexcept {
  return state_->timeout;
}

} // namespace lockstep

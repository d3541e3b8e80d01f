#pragma once

#include "lockstep/cross_device_ops.hpp"
#include "lockstep/detail/replica_calls.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/input_context.hpp"
#include "lockstep/multi_step.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/update.hpp"
#include "lockstep/values.hpp"
#include "lockstep/variable.hpp"

#include <any>
#include <chrono>
#include <tuple>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace lockstep {

class replica_context;
class strategy;

/// Per-call settings of `run`.
struct run_options {
  /// Deadline for every replica to return or reach its next `merge_call`;
  /// unset: the strategy's timeout.
  std::optional<std::chrono::milliseconds> timeout;
};

namespace detail {

struct strategy_state;
struct strategy_access;
struct public_strategy_state;

/// The strategy handle of `state` (a merge function passes it on).
strategy strategy_handle(strategy_state& state);

/// Runs `fn` once per replica and returns the results in replica order.
/// `steps`: the replica steps the call runs (a multi-step loop's count),
/// numbered for the timeline.
std::vector<std::any>
call_for_each_replica(strategy_state& state,
                      std::shared_ptr<const replica_function> fn,
                      const run_options& options, std::size_t steps = 1);

/// A multi-step loop's replica starts its step `index` (from 0): the
/// timeline's events on this thread belong to it.
void timeline_loop_step(std::size_t index) noexcept;

/// Throws unless this thread may use `state`'s cross-replica API.
void require_cross_replica_or_default_context(const strategy_state& state);

/// value_error: "A non-distributed value <value> cannot be reduced with the
/// given reduce op <op>."
[[noreturn]] void throw_non_distributed(reduce_op op, const std::string& value);

template <class T>
concept scalar = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

/// The tensor element type that holds a C++ scalar of type T.
template <scalar T>
using scalar_storage_t = std::conditional_t<
  std::is_floating_point_v<T>, std::conditional_t<(sizeof(T) <= 4), float, double>,
  std::conditional_t<(sizeof(T) <= 4), std::int32_t, std::int64_t>>;

/// Calls `fn(ctx, args...)` when `fn` takes the replica context first, else
/// `fn(args...)`. Every replica thread calls the same `fn` at once, so it is
/// called as const when it can be; a callable that needs a mutable call must
/// make that safe itself.
template <class F, class... Args>
decltype(auto) invoke_replica_fn(F& fn, replica_context& ctx, Args&&... args) {
  auto& callable = [&]() -> auto& {
    if constexpr (std::is_invocable_v<const F&, replica_context&, Args...>
                  || std::is_invocable_v<const F&, Args...>)
      return std::as_const(fn);
    else
      return fn;
  }();
  using callable_type = decltype(callable);
  if constexpr (std::is_invocable_v<callable_type, replica_context&, Args...>)
    return std::invoke(callable, ctx, std::forward<Args>(args)...);
  else
    return std::invoke(callable, std::forward<Args>(args)...);
}

/// The replica's index among this worker's replicas: which component of
/// a (local) distributed value is its own. In one process, its replica id.
std::size_t replica_id(const replica_context& ctx);

/// value_error unless `iterations` is at least 1.
void check_iterations(std::size_t iterations);

/// The pod strategy's host loops need static shapes (TF's TPUStrategy):
/// value_error with TF's text when `static_batch_size` (the iterator's
/// dataset's) is unknown. Nothing for the other strategies.
void check_host_loop_shapes(const strategy_state& state,
                            std::optional<std::int64_t> static_batch_size);

/// The device of each replica, in replica order: the strategy's devices;
/// for the default strategy, the calling thread's current device.
std::vector<device_spec> replica_devices(const strategy_state& state);

/// The input_context of this worker's one input pipeline: pipeline
/// `worker index` of `workers`, for all replicas in sync.
input_context worker_input_context(const strategy_state& state);

/// What lets the workers decide the end of their input together; empty in
/// one process.
worker_sum input_worker_sum(const strategy_state& state);

} // namespace detail

/// RAII guard of `strategy_extended::colocate_vars_with`.
class [[nodiscard]] colocation_guard {
public:
  colocation_guard(colocation_guard&& other) noexcept
    : pushed_(std::exchange(other.pushed_, false)) {}
  colocation_guard(const colocation_guard&) = delete;
  colocation_guard& operator=(const colocation_guard&) = delete;
  colocation_guard& operator=(colocation_guard&&) = delete;
  ~colocation_guard();

private:
  friend class strategy_extended;
  explicit colocation_guard(bool pushed) noexcept : pushed_(pushed) {}
  bool pushed_;
};

/// RAII guard of `strategy_extended::experimental_logical_device(id)`:
/// restores the current device and the placement of new variables when
/// destroyed, on the thread that made it.
class [[nodiscard]] logical_device_guard {
public:
  logical_device_guard(const logical_device_guard&) = delete;
  logical_device_guard& operator=(const logical_device_guard&) = delete;
  ~logical_device_guard();

private:
  friend class strategy_extended;
  /// Makes `device` current (when set) and places new variables on
  /// `placement` (when not empty).
  logical_device_guard(std::optional<device_spec> device, std::vector<device_spec> placement);
  std::optional<device_scope> device_;
  bool placed_ = false;
};

/// RAII guard returned by `strategy::scope()`: the thread is in the
/// strategy's cross-replica context until the guard is destroyed. Destroy it
/// on the thread that created it.
class [[nodiscard]] scope_guard {
public:
  scope_guard(scope_guard&& other) noexcept
    : pushed_(std::exchange(other.pushed_, false)) {}
  scope_guard(const scope_guard&) = delete;
  scope_guard& operator=(const scope_guard&) = delete;
  scope_guard& operator=(scope_guard&&) = delete;
  ~scope_guard();

private:
  friend class strategy;
  explicit scope_guard(bool pushed) noexcept : pushed_(pushed) {}
  bool pushed_;
};

/// TF's StrategyExtended: the cross-replica operations for library authors.
/// Owned by its strategy; every method except the queries requires the
/// strategy's cross-replica context (or the default context).
class strategy_extended {
public:
  strategy_extended(const strategy_extended&) = delete;
  strategy_extended& operator=(const strategy_extended&) = delete;

  /// Reduces a per-replica value onto `destination`'s devices. The pod
  /// strategy reduces to one device outside `run` (value_error "Multiple
  /// devices are not supported for pod_strategy", as TF's TPUStrategy);
  /// inside (a merge function), onto any devices. Inside `run` the pod
  /// strategy reduces with SUM and MEAN only (TF's TPU rule): any other op
  /// is context_error "Currently only support sum & mean in pod_strategy.",
  /// here and in batch_reduce_to, hence in replica_context::all_reduce.
  mirrored<tensor> reduce_to(reduce_op op, const per_replica<tensor>& value,
                             const destinations& destination) const;

  /// Reduces a plain value with TF's `reduce_non_distributed_value` rules,
  /// read as "N replicas each hold this value": MEAN, MIN and MAX broadcast
  /// it; SUM and PROD do so only with one replica, else value_error. With
  /// several workers, each worker's value is one component of a reduction
  /// across the workers (TF's multi-worker strategy). Inside the pod
  /// strategy's `run`, SUM and MEAN only, as for a per-replica value.
  mirrored<tensor> reduce_to(reduce_op op, const tensor& value,
                             const destinations& destination) const;

  /// The same rules for a C++ number, which is returned. SUM and PROD with
  /// several replicas also accept the numbers that N copies reduce to
  /// whatever N is: 0 for SUM (TF's rule), 0 and 1 for PROD.
  template <detail::scalar T>
  T reduce_to(reduce_op op, T value, const destinations& destination) const {
    check_reduce_non_distributed(destination);
    if (spans_workers()) {
      using storage = detail::scalar_storage_t<T>;
      const auto reduced = reduce_to(op, tensor::scalar(static_cast<storage>(value)), destination);
      return static_cast<T>(reduced.primary().template at<storage>(0));
    }
    const bool fixed_point = value == T{0} || (op == reduce_op::prod && value == T{1});
    if (op == reduce_op::mean || op == reduce_op::min || op == reduce_op::max || fixed_point
        || num_replicas_in_sync() == 1)
      return value;
    detail::throw_non_distributed(op, std::to_string(value));
  }

  /// True when the replicas are on several worker processes.
  bool spans_workers() const noexcept;

  /// One `reduce_to` per pair, in order (a strategy may fuse them); the
  /// pod strategy's rule applies to every pair.
  std::vector<mirrored<tensor>>
  batch_reduce_to(reduce_op op, const std::vector<reduce_pair>& pairs) const;

  /// A copy of `value` on every destination device.
  mirrored<tensor> broadcast_to(const tensor& value,
                                const destinations& destination) const;

  /// C++ numbers are returned unchanged, as TF returns Python numbers.
  template <detail::scalar T>
  T broadcast_to(T value, const destinations& destination) const {
    check_reduce_non_distributed(destination);
    return value;
  }

  /// `run` for library authors: requires the strategy's cross-replica
  /// context (or the default context) and enters the scope.
  template <class F, class... Args>
    requires(!std::is_same_v<std::decay_t<F>, run_options>)
  auto call_for_each_replica(F&& fn, const Args&... args) const;

  template <class F, class... Args>
  auto call_for_each_replica(const run_options& options, F&& fn,
                             const Args&... args) const;

  /// TF's run_steps_on_iterator, in the TPU form with the loop on the
  /// replicas: takes up to `iterations` steps from `iterator` on the
  /// calling thread (fewer when the data ends), then makes one dispatch in
  /// which each replica runs `fn(replica_context&, multi_step_context&,
  /// const X&)` once per step, in step order, with X its share of the step
  /// (`tensor`, or `nest<tensor>` for a nest dataset; `fn` may leave out
  /// the replica context). A call of K steps costs one dispatch, not K.
  /// Last-step outputs set in replica context are reduced once, after the
  /// loop. The iterator continues after the last step taken.
  ///
  /// On the pod strategy the steps must have static shapes, as TF's
  /// TPUStrategy requires: the iterator's dataset must have a static batch
  /// size (`dataset::batch(n, true)`), else value_error "pod currently
  /// requires fully defined shapes. Either use set_shape() on the input
  /// tensors or use dataset.batch(..., drop_remainder=True)." before any
  /// step is taken. The other strategies take partial batches.
  ///
  /// Requires the strategy's cross-replica context or the default context
  /// (context_error); value_error when `iterations` is 0. An exception in
  /// `fn` is rethrown here with its type, as `run` does; the strategy stays
  /// usable. The strategy's timeout applies to the whole loop between two
  /// merge_calls, as it does to one `run`.
  template <class F, distributable T>
  multi_step_context experimental_run_steps_on_iterator(
    F&& fn, distributed_iterator<T>& iterator, std::size_t iterations,
    std::map<std::string, tensor> initial_loop_values = {}) const;

  /// The same with `iterations` = steps_per_run().
  template <class F, distributable T>
  multi_step_context experimental_run_steps_on_iterator(F&& fn,
                                                        distributed_iterator<T>& iterator) const {
    return experimental_run_steps_on_iterator(std::forward<F>(fn), iterator, steps_per_run());
  }

  /// TF's steps_per_run: the steps of experimental_run_steps_on_iterator
  /// when the call gives none; the pod strategy's setting, 1 for the
  /// others (TF's default iterations).
  std::size_t steps_per_run() const noexcept;

  // -- variables --------------------------------------------------------------

  /// TF's update: calls `fn` once for each copy of `var`, on that copy's
  /// device, as fn(value, args...) with the copy's `tensor&` (written in
  /// place), or as fn(copy, args...) with the copy's `variable&` handle.
  /// Mirrored arguments are unwrapped per copy; per-replica arguments are a
  /// type_error (TF's "Expected value to be mirrored across replicas").
  /// Inside `fn`, writes and reads of this strategy's variables touch their
  /// copy on the same device only (TF's UpdateContext).
  ///
  /// Every copy applies the update in the same position of the variable's
  /// order of writes. When `fn` returns nothing the update is posted: it
  /// returns once queued, every later read or write of `var` comes after it,
  /// and an exception from `fn` is rethrown by the next read of `var` (which
  /// waits for every copy), by a write that finds it already applied, or by
  /// `synchronize()`. Otherwise it waits and returns the
  /// results as `mirrored<R>`, or as one `R` per copy with `ungrouped`.
  template <class F, class... Args>
  auto update(const variable& var, F&& fn, const Args&... args) const {
    using result_type = typename detail::typed_update<true, std::decay_t<F>, Args...>::result_type;
    if constexpr (std::is_void_v<result_type>)
      update_impl(var, std::forward<F>(fn), args...);
    else
      return mirrored<result_type>{update_impl(var, std::forward<F>(fn), args...)};
  }

  template <class F, class... Args>
  auto update(ungrouped_t, const variable& var, F&& fn, const Args&... args) const {
    return update_impl(var, std::forward<F>(fn), args...);
  }

  /// TF's update_non_slot: calls fn(args...) once per device of `devices`
  /// (from `non_slot_devices`), on that device's thread in an update
  /// context, and waits for all of them.
  template <class F, class... Args>
  auto update_non_slot(const std::vector<device_spec>& devices, F&& fn,
                       const Args&... args) const {
    using result_type = typename detail::typed_update<false, std::decay_t<F>, Args...>::result_type;
    if constexpr (std::is_void_v<result_type>)
      update_non_slot_impl(devices, std::forward<F>(fn), args...);
    else
      return mirrored<result_type>{update_non_slot_impl(devices, std::forward<F>(fn), args...)};
  }

  template <class F, class... Args>
  auto update_non_slot(ungrouped_t, const std::vector<device_spec>& devices, F&& fn,
                       const Args&... args) const {
    return update_non_slot_impl(devices, std::forward<F>(fn), args...);
  }

  /// TF's read_var: the aggregate of a sync-on-read variable, the value of
  /// the closest copy of any other.
  tensor read_var(const variable& var) const;

  /// Where `update_non_slot` should run for state shared by `vars`: the
  /// host of the pod strategy (TF's TPUStrategy); every device of a
  /// mirrored strategy; the devices of the variable with the smallest name
  /// otherwise.
  std::vector<device_spec> non_slot_devices(const std::vector<variable>& vars) const;

  /// Variables created while the guard lives are placed on `var`'s devices
  /// (optimizer slots next to their variable). value_error unless `var`
  /// was created in this strategy's scope.
  colocation_guard colocate_vars_with(const variable& var) const;

  /// TF's experimental_logical_device: while the guard lives, on this
  /// thread, work goes to logical core `logical_device_id` of each replica
  /// (model parallelism, docs/pod.md). In a replica function of this
  /// strategy: the calling replica's core is the current device (of new
  /// tensors), and variables created are placed on that core of every
  /// replica; in the strategy's cross-replica context: variables created
  /// are placed on that core of every replica, one copy per replica (TF's
  /// TPUMirroredVariable); elsewhere it places nothing. The pod strategy
  /// has `device_assignment().num_cores_per_replica()` logical cores per
  /// replica, the other strategies one, core 0, the replica itself (a
  /// scope that changes nothing). An id outside that range throws TF's
  /// value_error: "`logical_device_id` not in range (was 2, but there are
  /// only 2 logical devices per replica)."
  logical_device_guard experimental_logical_device(std::size_t logical_device_id) const;

  /// The variable a component belongs to (TF's value_container).
  variable value_container(const variable& component) const {
    return component.container();
  }

  /// True when `var` was created in this strategy's scope.
  bool variable_created_in_scope(const variable& var) const;

  /// Waits until every write posted to this strategy's variables has been
  /// applied and rethrows the first that threw since the last call.
  void synchronize() const;

  /// The devices replicas run on; the default strategy has none (context_error).
  const std::vector<device_spec>& worker_devices() const;
  /// The devices variables live on; the default strategy has none.
  const std::vector<device_spec>& parameter_devices() const;

  bool experimental_between_graph() const noexcept;
  bool experimental_should_init() const noexcept;
  bool should_checkpoint() const noexcept;
  bool should_save_summary() const noexcept;

  /// The algorithm reductions delegate to.
  lockstep::cross_device_ops& cross_device_ops() const;

  /// The flight recorder of the replicas' all_reduce collectives (a
  /// slice_all_reduce strategy's): the last 64, oldest first, one per line
  /// with sequence number, op, dtype, shape, bytes, outcome, start and
  /// duration. "" for strategies whose all_reduce goes through merge_call.
  /// Stall errors include its last entries.
  std::string collective_flight_record() const;

  /// TF's value_container: the distributed value a component belongs to.
  /// Values that are not components of a distributed variable are their own
  /// container.
  template <class T>
  const T& value_container(const T& value) const noexcept {
    return value;
  }

  /// The default deadline of a `run`.
  std::chrono::milliseconds timeout() const noexcept;

  std::size_t num_replicas_in_sync() const noexcept;

private:
  friend struct detail::public_strategy_state;
  explicit strategy_extended(detail::strategy_state& state) : state_(&state) {}

  template <class F, class... Args>
  auto update_impl(const variable& var, F&& fn, const Args&... args) const {
    using update_type = detail::typed_update<true, std::decay_t<F>, Args...>;
    using result_type = typename update_type::result_type;
    detail::require_cross_replica_or_default_context(*state_);
    const auto copies = detail::copies_of(var);
    (detail::check_mirrored(args, copies), ...);
    auto work = std::make_shared<update_type>(std::forward<F>(fn), args..., copies);
    detail::post_update(*state_, var, work, !std::is_void_v<result_type>);
    if constexpr (!std::is_void_v<result_type>)
      return work->results();
  }

  template <class F, class... Args>
  auto update_non_slot_impl(const std::vector<device_spec>& devices, F&& fn,
                            const Args&... args) const {
    using update_type = detail::typed_update<false, std::decay_t<F>, Args...>;
    detail::require_cross_replica_or_default_context(*state_);
    (detail::check_mirrored(args, devices.size()), ...);
    auto work = std::make_shared<update_type>(std::forward<F>(fn), args..., devices.size());
    detail::run_non_slot(*state_, devices, work);
    if constexpr (!std::is_void_v<typename update_type::result_type>)
      return work->results();
  }

  void check_reduce_non_distributed(const destinations& destination) const;

  detail::strategy_state* state_;
};

/// TF's tf.distribute.Strategy: runs a function on every replica and combines
/// the results. A strategy is a handle: copies refer to the same strategy,
/// and the last copy stops its replica actors. Its cross-replica API is used
/// from one thread at a time; a concurrent call throws context_error.
class strategy {
public:
  /// Enters the strategy's cross-replica context on this thread (re-entrant).
  /// Entering a second strategy's scope throws context_error, as in TF.
  scope_guard scope() const;

  /// Runs `fn` once per replica, each on its own device, under `scope()`.
  /// `fn` may take `replica_context&` first; each argument is passed through
  /// `select_replica`, so a `per_replica<T>` becomes replica r's `T`. The
  /// result is the replicas' values in replica order (`void` if `fn`
  /// returns nothing). An exception in any replica is rethrown here with its
  /// type; the strategy stays usable.
  template <class F, class... Args>
    requires(!std::is_same_v<std::decay_t<F>, run_options>)
  auto run(F&& fn, const Args&... args) const {
    return run(run_options{}, std::forward<F>(fn), args...);
  }

  template <class F, class... Args>
  auto run(const run_options& options, F&& fn, const Args&... args) const {
    return extended().call_for_each_replica(options, std::forward<F>(fn),
                                            args...);
  }

  /// Reduces a per-replica value to one value on the current device. A value
  /// that is the same object on every replica (`is_single()`) follows TF's
  /// rules for non-distributed values.
  template <class T>
  T reduce(reduce_op op, const per_replica<T>& value) const {
    if constexpr (std::is_same_v<T, tensor>) {
      return reduce_tensor(op, value);
    } else {
      static_assert(detail::scalar<T>, "reduce needs tensors or numbers");
      if (value.is_single())
        return reduce(op, value.primary());
      using storage = detail::scalar_storage_t<T>;
      std::vector<tensor> parts;
      for (const auto& x : value.values())
        parts.push_back(tensor::scalar(static_cast<storage>(x)));
      return static_cast<T>(
        reduce_tensor(op, per_replica<tensor>{parts}).template at<storage>(0));
    }
  }

  /// Reduces along `axis` too: SUM sums every component over the axis, then
  /// across replicas; MEAN divides that by the total length of the axis, so
  /// replicas with partial batches count exactly. MIN, MAX and PROD throw
  /// value_error naming the op ("reduce along an axis supports sum and mean,
  /// not max"): there is no kernel for them along an axis.
  tensor reduce(reduce_op op, const per_replica<tensor>& value,
                std::int64_t axis) const;

  /// A plain value, with TF's `reduce_non_distributed_value` rules (see
  /// `strategy_extended::reduce_to`).
  tensor reduce(reduce_op op, const tensor& value) const;

  template <detail::scalar T>
  T reduce(reduce_op op, T value) const {
    detail::require_cross_replica_or_default_context(*state_);
    return extended().reduce_to(op, value, current_device());
  }

  /// The components of a distributed value in replica order; a plain value
  /// is its own single result.
  template <class T>
  auto experimental_local_results(const T& value) const {
    return local_results(value);
  }

  std::size_t num_replicas_in_sync() const noexcept;

  // -- distributed input ------------------------------------------------------
  // The dataset types are only named here: a program that calls
  // experimental_distribute_dataset, experimental_distribute_datasets_from_function
  // or make_input_fn_iterator includes "lockstep/distributed_dataset.hpp"
  // (or "lockstep/lockstep.hpp"), which brings the dataset pipeline.

  /// TF's experimental_distribute_dataset: each element of `data` is a
  /// global batch (a tensor, or a nest of tensors that agree in dimension
  /// 0), split along dimension 0 into `num_replicas_in_sync()` per-replica
  /// batches, each copied to its replica's device. One worker: consecutive
  /// parts in replica order, as evenly as possible (the first replicas get
  /// one row more). Several workers, in TF's order: every worker reads the
  /// same global batches, cut into slices of ceil(rows / replicas) rows
  /// that go to the workers round-robin, each worker's replicas taking its
  /// slices in turn (detail::replica_rows); they end the data together.
  /// Replicas without rows get empty batches: all see the same steps. Throws
  /// value_error ("Batch size 6 cannot be sharded evenly across replicas
  /// 4") when `data.static_batch_size()` is known and not divisible.
  template <distributable T>
  distributed_dataset<T> experimental_distribute_dataset(const dataset<T>& data,
                                                         const input_options& options = {}) const {
    static_assert(detail::complete_type<distributed_dataset<T>>,
                  "experimental_distribute_dataset needs #include \"lockstep/distributed_dataset.hpp\"");
    auto devices = detail::replica_devices(*state_);
    detail::check_shardable(data.static_batch_size(), num_replicas_in_sync());
    distributed_dataset<T> distributed{data, distributed_dataset<T>::mode::split_global_batches,
                                       std::move(devices), options,
                                       detail::worker_input_context(*state_)};
    distributed.agree_ = detail::input_worker_sum(*state_);
    return distributed;
  }

  /// TF's experimental_distribute_datasets_from_function: calls
  /// `fn(const input_context&)` once, for the one input pipeline of this
  /// worker (num_input_pipelines: the workers, input_pipeline_id: this
  /// worker's index; 1 and 0 in one process), and distributes
  /// the dataset it returns, whose elements are per-replica batches:
  /// step k gives this worker's replica r element k * R + r, R being
  /// its replicas. When the data ends in the middle of a step, the
  /// replicas after the last element get empty batches shaped like the
  /// step's first. With several workers, each worker's pipeline may end
  /// at another step: the workers decide the end together (iterator's
  /// next()), and until every one has ended, those whose data did get
  /// empty batches, so all take the same number of steps.
  template <class F>
  auto experimental_distribute_datasets_from_function(F&& fn,
                                                      const input_options& options = {}) const {
    using result_type = std::decay_t<std::invoke_result_t<F&, const input_context&>>;
    using element_type = typename result_type::element_type;
    static_assert(std::is_same_v<result_type, dataset<element_type>>,
                  "the input function must return a dataset");
    static_assert(detail::complete_type<distributed_dataset<element_type>>,
                  "experimental_distribute_datasets_from_function needs "
                  "#include \"lockstep/distributed_dataset.hpp\"");
    auto devices = detail::replica_devices(*state_);
    const auto context = detail::worker_input_context(*state_);
    dataset<element_type> data = fn(context);
    distributed_dataset<element_type> distributed{
      std::move(data), distributed_dataset<element_type>::mode::per_replica_batches,
      std::move(devices), options, context};
    distributed.agree_ = detail::input_worker_sum(*state_);
    return distributed;
  }

  /// TF's make_input_fn_iterator: an iterator over
  /// `experimental_distribute_datasets_from_function(fn)`. Only
  /// `input_replication_mode::per_worker` is supported; any other mode
  /// throws value_error ("Input replication mode not supported: ...").
  template <class F>
  auto make_input_fn_iterator(F&& fn,
                              input_replication_mode mode = input_replication_mode::per_worker,
                              const input_options& options = {}) const {
    detail::check_input_replication_mode(mode);
    return experimental_distribute_datasets_from_function(std::forward<F>(fn), options)
      .make_iterator();
  }

  /// TF's experimental_distribute_values_from_function: calls
  /// `fn(const value_context&)` once per replica, in replica order, on the
  /// calling thread with that replica's device as the current device, and
  /// returns the results as a per_replica (always, as TF wraps even one).
  template <class F>
  auto experimental_distribute_values_from_function(F&& fn) const {
    using result_type = std::decay_t<std::invoke_result_t<F&, const value_context&>>;
    const auto devices = detail::replica_devices(*state_);
    std::vector<result_type> values;
    values.reserve(devices.size());
    for (std::size_t r = 0; r < devices.size(); ++r) {
      device_scope on_device{devices[r]};
      values.push_back(fn(value_context{r, devices.size()}));
    }
    return per_replica<result_type>{std::move(values)};
  }

  strategy_extended& extended() const noexcept;

  /// E.g. "mirrored_strategy(/job:localhost/replica:0/task:0/device:CPU:0, ...)".
  std::string to_string() const;

  /// The same strategy (identity, not equal configuration).
  friend bool operator==(const strategy& a, const strategy& b) noexcept {
    return a.state_ == b.state_;
  }

private:
  // The library makes strategies from their state (strategy_state::handle)
  // and reaches the state through detail::strategy_access.
  friend struct detail::strategy_access;
  friend class mirrored_strategy;
  friend class multi_worker_mirrored_strategy;
  friend class one_device_strategy;
  friend class pod_strategy;

  explicit strategy(std::shared_ptr<detail::strategy_state> state) noexcept
    : state_(std::move(state)) {}
  detail::strategy_state& state() const noexcept { return *state_; }

  tensor reduce_tensor(reduce_op op, const per_replica<tensor>& value) const;

  std::shared_ptr<detail::strategy_state> state_;
};

template <class F, class... Args>
  requires(!std::is_same_v<std::decay_t<F>, run_options>)
auto strategy_extended::call_for_each_replica(F&& fn,
                                              const Args&... args) const {
  return call_for_each_replica(run_options{}, std::forward<F>(fn), args...);
}

template <class F, class... Args>
auto strategy_extended::call_for_each_replica(const run_options& options,
                                              F&& fn,
                                              const Args&... args) const {
  using result_type = std::decay_t<decltype(detail::invoke_replica_fn(
    fn, std::declval<replica_context&>(),
    std::declval<select_replica_t<Args>>()...))>;
  // Owned by the replicas: a replica that outlives a timed-out call still
  // finds its function and arguments.
  auto task = std::make_shared<const detail::replica_function>(
    [fn = std::decay_t<F>(std::forward<F>(fn)),
     bound = std::tuple<Args...>(args...)](replica_context& ctx) mutable -> std::any {
      const auto r = detail::replica_id(ctx);
      return std::apply(
        [&](const auto&... a) -> std::any {
          if constexpr (std::is_void_v<result_type>) {
            detail::invoke_replica_fn(fn, ctx, select_replica(r, a)...);
            return {};
          } else {
            return detail::invoke_replica_fn(fn, ctx, select_replica(r, a)...);
          }
        },
        bound);
    });
  auto results = detail::call_for_each_replica(*state_, std::move(task), options);
  if constexpr (!std::is_void_v<result_type>) {
    std::vector<result_type> values;
    values.reserve(results.size());
    for (auto& x : results)
      values.push_back(std::any_cast<result_type>(std::move(x)));
    if constexpr (is_structure_v<result_type>)
      (void) regroup(values); // TF rejects structures that differ per replica
    return per_replica<result_type>{std::move(values)};
  }
}

template <class F, distributable T>
multi_step_context strategy_extended::experimental_run_steps_on_iterator(
  F&& fn, distributed_iterator<T>& iterator, std::size_t iterations,
  std::map<std::string, tensor> initial_loop_values) const {
  using step_type = typename distributed_iterator<T>::element_type;
  detail::require_cross_replica_or_default_context(*state_);
  detail::check_host_loop_shapes(*state_, iterator.static_batch_size());
  detail::check_iterations(iterations);
  multi_step_context context{*state_, std::move(initial_loop_values)};
  // Shared with the replicas: a replica that outlives a timed-out call still
  // finds its steps and its context.
  auto steps = std::make_shared<std::vector<step_type>>();
  while (steps->size() < iterations) {
    auto step = iterator.next();
    if (!step)
      break;
    steps->push_back(std::move(*step));
  }
  // One slot per replica of this worker; end_loop reduces across all.
  context.begin_loop(steps->size(), detail::replica_devices(*state_).size());
  if (!steps->empty()) {
    auto task = std::make_shared<const detail::replica_function>(
      [fn = std::decay_t<F>(std::forward<F>(fn)), steps,
       context](replica_context& ctx) mutable -> std::any {
        const auto r = detail::replica_id(ctx);
        std::size_t index = 0;
        for (const auto& step : *steps) {
          detail::timeline_loop_step(index++);
          const auto mine = select_replica(r, step);
          detail::invoke_replica_fn(fn, ctx, context, mine);
        }
        return {};
      });
    try {
      detail::call_for_each_replica(*state_, std::move(task), run_options{}, steps->size());
    } catch (...) {
      context.fail();
      throw;
    }
  }
  context.end_loop();
  return context;
}

} // namespace lockstep

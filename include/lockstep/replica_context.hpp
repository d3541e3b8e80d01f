#pragma once

#include "lockstep/detail/replica_calls.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/error.hpp"
#include "lockstep/nest.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/strategy.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"

#include <any>
#include <chrono>
#include <cstdint>
#include <string>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <typeinfo>
#include <type_traits>
#include <utility>
#include <vector>

namespace lockstep {

namespace detail {

struct replica_context_access;

void require_replica_context(const replica_context& ctx);

[[noreturn]] void throw_merge_argument_mismatch(std::size_t replica,
                                                const std::type_info& expected);

/// Calls `fn(strategy, args...)` when `fn` takes the strategy first, else
/// `fn(args...)`.
template <class F, class... Args>
decltype(auto) invoke_merge_fn(F& fn, strategy& s, Args&&... args) {
  if constexpr (std::is_invocable_v<F&, strategy&, Args...>)
    return std::invoke(fn, s, std::forward<Args>(args)...);
  else
    return std::invoke(fn, std::forward<Args>(args)...);
}

} // namespace detail

/// TF's tf.distribute.experimental.CommunicationOptions for one
/// `replica_context::all_reduce`. Unset fields take the strategy's settings.
/// They apply where the replicas reduce among themselves (slice_all_reduce);
/// an all_reduce that goes through merge_call throws value_error when any
/// is set, rather than ignore it.
struct communication_options {
  /// Packs of at least this many bytes (TF's bytes_per_pack); unset: the
  /// strategy's slice_all_reduce_options::packing.
  std::optional<std::size_t> bytes_per_pack;
  /// How long a replica waits for the others at the collective before it
  /// throws timeout_error naming them; unset: twice the run's timeout (the
  /// run's own deadline reports a stall first).
  std::optional<std::chrono::milliseconds> timeout;
  /// Names the collective in mismatch and stall errors and in the flight
  /// recorder; every replica must pass the same tag.
  std::string tag;
  /// The algorithm between workers for this all-reduce (TF's
  /// `implementation`, with lockstep's algorithms): "ring",
  /// "recursive_doubling" or "halving_doubling" (docs/algorithms.md);
  /// empty: LOCKSTEP_ALGORITHM's, else the one the cost model chooses for
  /// the size and the number of workers. Every replica must pass the same.
  /// Communicators with one algorithm (shared memory within a host, MPI)
  /// ignore it.
  std::string algorithm;
};

/// TF's ReplicaContext: what a replica function sees of its strategy. Valid
/// only on the thread running that replica (or, for the default replica
/// context, on any thread outside a strategy).
class replica_context {
public:
  replica_context(const replica_context&) = delete;
  replica_context& operator=(const replica_context&) = delete;

  lockstep::strategy strategy() const;

  std::size_t num_replicas_in_sync() const noexcept;

  /// This replica's index in [0, num_replicas_in_sync).
  std::size_t replica_id_in_sync_group() const;

  /// The device(s) this replica runs on.
  std::vector<device_spec> devices() const;

  /// Model parallelism inside a replica (docs/pod.md): runs `fn()` on this
  /// replica's logical core `logical_device_id` and returns its result (an
  /// exception from `fn` is rethrown here, with its type). On the pod
  /// strategy `fn` runs on the thread of that core's device (its device
  /// executor, which also applies the writes of the variable copies there,
  /// in order), with the core's device current and this replica's copies of
  /// the strategy's variables as its own; this thread waits at most the
  /// strategy's timeout (timeout_error naming the replica and the core).
  /// Other strategies have logical core 0 alone, the replica itself: `fn`
  /// runs here. `logical_device_id` outside [0, logical cores per replica)
  /// throws TF's value_error ("`logical_device_id` not in range ...").
  ///
  /// Tensors do not move by themselves: `fn` copies what it takes from
  /// another core to its own device (`x.to(current_device())`), and the
  /// caller copies what it gets back (as TF places a tensor where its op
  /// runs). Inside `fn`, read variables; write them, and call merge_call
  /// or all_reduce, on the replica's own thread, after `fn` returns.
  /// Capture by value what `fn` uses after a timeout: it still runs.
  template <class F>
  auto experimental_logical_device(std::size_t logical_device_id, F&& fn) {
    using callable = std::decay_t<F>;
    using result_type = std::invoke_result_t<callable&>;
    if constexpr (std::is_void_v<result_type>) {
      run_on_logical_device(logical_device_id, std::function<void()>{std::forward<F>(fn)});
    } else {
      auto result = std::make_shared<std::optional<result_type>>();
      run_on_logical_device(logical_device_id,
                            [result, part = callable(std::forward<F>(fn))]() mutable {
                              result->emplace(part());
                            });
      return std::move(**result);
    }
  }

  /// Pauses every replica at this call, runs `merge_fn` once in
  /// cross-replica context with each argument regrouped into a
  /// `per_replica` (`merge_fn` may take the strategy first), and returns
  /// `select_replica(r, result)` to replica r. Every replica must make the
  /// same sequence of calls with the same argument types.
  template <class MergeFn, class... Args>
  auto merge_call(MergeFn&& merge_fn, const Args&... args) {
    using result_type = std::decay_t<decltype(detail::invoke_merge_fn(
      merge_fn, std::declval<lockstep::strategy&>(),
      std::declval<const per_replica<Args>&>()...))>;
    using pack = std::tuple<Args...>;
    detail::require_replica_context(*this);
    // TF runs replica 0's merge function; the others need not package theirs.
    std::shared_ptr<const detail::merge_function> erased;
    if (replica_id_ == 0)
      erased = std::make_shared<const detail::merge_function>(
      [fn = std::decay_t<MergeFn>(std::forward<MergeFn>(merge_fn))](
        detail::strategy_state& state, std::vector<std::any>& packs) mutable {
        auto s = detail::strategy_handle(state);
        std::vector<pack> typed;
        typed.reserve(packs.size());
        for (std::size_t r = 0; r < packs.size(); ++r) {
          auto* p = std::any_cast<pack>(&packs[r]);
          if (p == nullptr)
            detail::throw_merge_argument_mismatch(r, typeid(pack));
          typed.push_back(std::move(*p));
        }
        auto grouped = regroup_arguments(typed, std::index_sequence_for<Args...>{});
        std::vector<std::any> out(packs.size());
        if constexpr (!std::is_void_v<result_type>) {
          auto merged = std::apply(
            [&](const auto&... a) { return detail::invoke_merge_fn(fn, s, a...); },
            grouped);
          for (std::size_t r = 0; r < out.size(); ++r)
            out[r] = select_replica(r, merged);
        } else {
          std::apply(
            [&](const auto&... a) { detail::invoke_merge_fn(fn, s, a...); },
            grouped);
        }
        return out;
      });
    auto mine = channel_->merge(std::any{pack{args...}}, std::move(erased));
    if constexpr (!std::is_void_v<result_type>)
      return std::any_cast<select_replica_t<result_type>>(std::move(mine));
  }

  /// Reduces `value` across replicas; every replica gets the result on its
  /// own device. All replicas must call it in the same order with the same
  /// op, dtypes, shapes, structure and options. With a slice_all_reduce
  /// strategy the replica threads meet at the collective themselves (see
  /// docs/algorithms.md); otherwise it is a merge_call, which uses the
  /// strategy's cross_device_ops as it is and ignores `options`. On the
  /// pod strategy only SUM and MEAN (TF's TPU rule): any other op is
  /// context_error "Currently only support sum & mean in pod_strategy.".
  tensor all_reduce(reduce_op op, const tensor& value, const communication_options& options = {});
  std::vector<tensor> all_reduce(reduce_op op, const std::vector<tensor>& values,
                                 const communication_options& options = {});
  nest<tensor> all_reduce(reduce_op op, const nest<tensor>& value,
                          const communication_options& options = {});

  /// The same, in place where it can be: a tensor whose buffer no other
  /// handle shares (the caller moved its only handle in) receives its own
  /// result, so a strategy that reduces on the replica threads allocates
  /// nothing for it. Results are the same as the copying forms'.
  tensor all_reduce(reduce_op op, tensor&& value, const communication_options& options = {});
  std::vector<tensor> all_reduce(reduce_op op, std::vector<tensor>&& values,
                                 const communication_options& options = {});

  /// The flight recorder of this strategy's replica collectives (the last
  /// 64: sequence number, op, dtype, shape, bytes, outcome, start and
  /// duration), one per line; "" when all_reduce goes through merge_call.
  std::string collective_flight_record() const;

  /// For the library's internals.
  detail::strategy_state& state() const noexcept { return *state_; }

  /// For the library's internals: the replica's collectives in call
  /// `epoch` get sequence numbers from `first_seq` up and wait at most
  /// `timeout`; `first_seq` only ever rises (kept by the replica's
  /// channel, merge_channel::begin_collectives).
  void begin_collectives(std::uint64_t first_seq, std::chrono::milliseconds timeout,
                         std::uint64_t epoch) noexcept {
    channel_->begin_collectives(first_seq, timeout, epoch);
  }

private:
  friend struct detail::replica_context_access;

  /// experimental_logical_device(id, fn) without the result's type.
  void run_on_logical_device(std::size_t logical_device_id, std::function<void()> fn);

  replica_context(detail::strategy_state& state, std::size_t replica_id,
                  detail::merge_channel& channel) noexcept
    : state_(&state), replica_id_(replica_id), channel_(&channel) {}

  /// all_reduce on the replica threads (slice_all_reduce strategies): the
  /// replicas meet at the collective without the strategy actor. `owned`:
  /// `values` itself, which the caller gave up (an rvalue): a tensor no one
  /// else holds takes its own result, and when all do, the vector is
  /// reduced in place and returned.
  std::vector<tensor> all_reduce_on_replicas(reduce_op op, const std::vector<tensor>& values,
                                             const communication_options& options,
                                             const std::string& structure,
                                             std::vector<tensor>* owned = nullptr);

  template <class... Args, std::size_t... Is>
  static std::tuple<per_replica<Args>...>
  regroup_arguments(const std::vector<std::tuple<Args...>>& packs,
                    std::index_sequence<Is...>) {
    return {column<Is>(packs)...};
  }

  template <std::size_t I, class... Args>
  static auto column(const std::vector<std::tuple<Args...>>& packs) {
    using E = std::tuple_element_t<I, std::tuple<Args...>>;
    std::vector<E> values;
    values.reserve(packs.size());
    for (const auto& p : packs)
      values.push_back(std::get<I>(p));
    return per_replica<E>{std::move(values)};
  }

  detail::strategy_state* state_;
  std::size_t replica_id_;
  detail::merge_channel* channel_;
};

} // namespace lockstep

#pragma once

// The shared state behind a strategy handle, and the executor interface that
// runs replica functions. Internal: not installed. It sits below the
// strategy API (src/strategies, lockstep/strategy.hpp), which gives it its
// public faces (src/strategies/public_state.hpp), so that the actors, the
// variables and input below the API use it without including the API.

#include "lockstep/cross_device_ops.hpp"
#include "lockstep/detail/replica_calls.hpp"
#include "lockstep/detail/worker_sum.hpp"
#include "lockstep/device_spec.hpp"

#include "cross_device_ops/replica_collectives.hpp"
#include "devices/device_executor.hpp"
#include "replication/topology.hpp"
#include "replication/worker_services.hpp"
#include "runtime/timeline.hpp"

#include <any>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace lockstep {
class variable;
}

namespace lockstep::detail {

/// Runs a replica function once per replica and gathers the results.
class replica_executor {
public:
  virtual ~replica_executor() = default;

  /// Results in replica order. Rethrows a replica's exception; throws
  /// timeout_error when a replica does not return or reach `merge_call`
  /// within `timeout`.
  virtual std::vector<std::any> run(std::shared_ptr<const replica_function> fn,
                                    std::chrono::milliseconds timeout)
    = 0;

  /// Stops the replicas (bounded wait). False when a replica thread still
  /// runs user code, which may use the strategy's state: the state must then
  /// outlive it.
  virtual bool stop() noexcept { return true; }
};

/// What the pod strategy (TF's TPUStrategy) changes in the API that every
/// strategy shares (src/strategies/strategy.cpp).
struct pod_rules {
  /// Where non-slot state lives (TF's non_slot_devices): the host CPU of
  /// replica 0's device.
  device_spec host_device;
  /// The steps of a host loop when the call gives none (TF's steps_per_run).
  std::size_t steps_per_run = 1;
  /// The canonical device of every logical core of every replica of this
  /// worker, [replica][logical core] (TF's logical_core): column 0 is
  /// `devices`.
  std::vector<std::vector<device_spec>> logical_cores;
};

/// A strategy's state. The strategies make it as a public_strategy_state
/// (src/strategies/public_state.hpp), which adds what only the API knows:
/// the strategy_extended of its handles, and the replica contexts.
struct strategy_state : std::enable_shared_from_this<strategy_state> {
  /// Shares a new strategy's `state`. When the last handle goes, the
  /// replicas stop and the state is deleted, unless a replica is still
  /// stuck in user code: then the state is kept (never freed) so that code
  /// stays valid. It holds the timeline's recording (`timeline`) unless
  /// `records` is false (the default strategy, which is never destroyed and
  /// would never end one).
  static std::shared_ptr<strategy_state> share(std::unique_ptr<strategy_state> state,
                                               bool records = true);

  /// `name` names the strategy in errors ("mirrored_strategy(<devices>)");
  /// `replicated`: see the member.
  strategy_state(std::string name, detail::topology topology, bool replicated,
                 std::shared_ptr<cross_device_ops> ops, std::chrono::milliseconds timeout);
  virtual ~strategy_state() = default;

  strategy_state(const strategy_state&) = delete;
  strategy_state& operator=(const strategy_state&) = delete;

  /// The context replica `replica` (of this worker) runs its functions
  /// with, merging through `channel`; made once per replica by the
  /// executor that runs it, and kept by it.
  virtual std::shared_ptr<replica_context> make_replica_context(std::size_t replica,
                                                                merge_channel& channel)
    = 0;

  /// What a mirrored variable's write in replica context does, once, with
  /// the values merged for it: posts `values` (one per copy) to `whole`.
  using merged_write = std::function<void(const variable& whole, std::vector<tensor> values)>;

  /// A mirrored variable's write in replica context, which merges through
  /// the strategy API: this replica's `value` meets the other replicas' in
  /// a merge_call, whose merge function reduces them by `reduce` onto
  /// `whole`'s copies (strategy_extended::reduce_to; none: replica 0's
  /// value, broadcast_to) and passes the result to `post`.
  virtual void merge_write(const variable& whole, std::optional<reduce_op> reduce,
                           const tensor& value, merged_write post)
    = 0;

  /// "mirrored_strategy(<devices>)", used in error messages.
  const std::string& name() const noexcept { return name_; }

  /// True for the process's default strategy (default_strategy_state()).
  bool is_default() const noexcept;

  const detail::topology topology;
  /// This worker's devices, one replica each (topology.local_devices).
  const std::vector<device_spec>& devices = topology.local_devices;
  /// True when values and variables are distributed over the replicas
  /// (per_replica / mirrored, as in TF's MirroredStrategy family); false
  /// for the default and one-device strategies, whose one replica holds
  /// plain values and variables.
  const bool replicated;
  const std::shared_ptr<cross_device_ops> ops;
  const std::chrono::milliseconds timeout;

  /// The thread using the cross-replica API right now, and its nesting depth
  /// (a `run` inside a merge function is nested on the same thread).
  std::atomic<std::thread::id> user;
  int user_depth = 0;

  /// How many replica dispatches (`call_for_each_replica`) this strategy
  /// has made: one per `run`, one per multi-step loop. For tests.
  std::atomic<std::uint64_t> dispatches{0};

  // -- variables ----------------------------------------------------------

  /// The executor of device `device` (an index into `devices`), which runs
  /// the copies of variables there; started on first use.
  detail::device_executor& device_executor(std::size_t device);

  /// The executor of `device` (canonical): one of `devices`', or, for a
  /// device that runs no replica (a pod's logical core other than 0), one
  /// started on first use and kept, drained and stopped with the others.
  detail::device_executor& device_executor(const device_spec& device);

  /// True on one of this strategy's device executor threads.
  bool on_device_executor_thread() const;

  /// Waits until every write posted so far to the device executors has run;
  /// timeout_error after the strategy's timeout.
  void drain_device_executors();

  /// Records a posted write that threw (for `synchronize()`).
  void record_write_failure(std::exception_ptr error);
  /// The first write failure recorded since the last call, if any.
  std::exception_ptr take_write_failure();

  /// How replica_context::all_reduce runs on the replica threads, chosen
  /// by `ops` (cross_device_ops::replica_collectives); no communicator: it
  /// goes through merge_call.
  detail::replica_collectives collectives;

  /// Multi-worker: what the worker gives its strategy (the chief's initial
  /// values, the sum over the workers), kept while the strategy lives and
  /// let go after its replicas stop, which closes the cluster connections;
  /// null in one process.
  std::shared_ptr<worker_services> services;

  /// The sum over the workers (services->sum_over_workers()); empty in one
  /// process.
  detail::worker_sum sum_over_workers() const {
    return services ? services->sum_over_workers() : detail::worker_sum{};
  }

  /// The timeline's recording, kept while the strategy lives; null when
  /// none is asked for.
  std::shared_ptr<timeline_recording> timeline;
  /// Whether dump_flight_recorders covers this strategy: from its first
  /// dispatch on, when it is fully built.
  std::atomic<bool> dumped{false};

  /// The pod strategy's rules; unset for the other strategies. Set once,
  /// before the replicas start.
  std::optional<pod_rules> pod;

  /// Runs the replicas; stopped before the rest of the state is destroyed.
  std::unique_ptr<replica_executor> executor;

private:
  const std::string name_;
  mutable std::mutex variables_mutex_;
  std::vector<std::shared_ptr<detail::device_executor>> device_executors_;
  /// The executors of devices outside `devices`, in order of first use.
  std::vector<std::shared_ptr<detail::device_executor>> other_executors_;
  std::exception_ptr write_failure_;
};

/// The process-wide default strategy (never destroyed).
strategy_state& default_strategy_state();

/// RAII claim of a strategy's cross-replica API by the calling thread;
/// context_error when another thread holds it.
class user_claim {
public:
  explicit user_claim(strategy_state& state);
  ~user_claim();
  user_claim(const user_claim&) = delete;
  user_claim& operator=(const user_claim&) = delete;

private:
  strategy_state& state_;
};

/// True on the thread that dispatches a call of `state`'s replicas (`run`,
/// a multi-step loop) while the call lasts, which is where its merge
/// functions run: TF's "inside the replicated computation".
bool in_dispatch(const strategy_state& state) noexcept;

/// `timeout` if it is a valid deadline (> 0, at most
/// runtime_options::max_timeout), else value_error naming `what`.
std::chrono::milliseconds checked_timeout(std::chrono::milliseconds timeout,
                                          const char* what);

/// "replica 1 (/job:localhost/replica:0/task:0/device:CPU:1)"
std::string describe_replica(const strategy_state& state, std::size_t replica);

} // namespace lockstep::detail

#pragma once

// strategy_actor: the executor of a mirrored strategy. It does what TF's
// mirrored_run does on the main thread, on the calling thread, through a
// mailbox actor that the caller drives like a scoped actor (but that wakes
// promptly, see prompt_blocking_actor.hpp): `run` broadcasts run_message
// to the replica actors and gathers their replica_result / merge_request
// messages; when all N paused in merge_call it runs replica 0's merge function in cross-replica context and scatters
// each replica's slice (merge_reply). Both sides are threads blocked on
// their own mailboxes, so no hop goes through CAF's scheduler (whose idle
// workers sleep, costing ~85 us per wake-up; see docs/threading.md).

#include "actors/messages.hpp"
#include "replication/strategy_state.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/scoped_execution_unit.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::actors {


class strategy_actor final : public detail::replica_executor {
public:
  /// Spawns one replica actor per device of `state`. When one cannot start
  /// (no thread or no memory), it stops those that did and records the
  /// failure in `start_failure()`, which the owner must raise once it owns
  /// the strategy actor: replicas that did not stop in time still use `state`,
  /// which the owner then keeps alive (strategy_state's deleter).
  explicit strategy_actor(detail::strategy_state& state);

  /// Why not every replica could start (which one, the reason, how many
  /// had started); empty when all did.
  const std::string& start_failure() const noexcept { return start_failure_; }

  /// Stops the replicas if `stop` did not run yet.
  ~strategy_actor() override;

  /// Sends every replica actor an exit and waits (bounded) until they are down.
  bool stop() noexcept override;

  std::vector<std::any> run(std::shared_ptr<const detail::replica_function> fn,
                            std::chrono::milliseconds timeout) override;

  /// Test seam: called with the replica's index before each replica actor
  /// is started; an exception from it fails that start as a failed thread
  /// creation would. Not thread-safe; tests only.
  static std::function<void(std::size_t)>& replica_start_hook();

private:
  struct call;
  using time_point = std::chrono::steady_clock::time_point;

  caf::actor spawn_replica(const caf::actor& me, std::size_t r, std::chrono::microseconds spin);
  /// Stops the replicas started so far and sets start_failure_, naming
  /// `replica`, `reason` and how many had started.
  void record_start_failure(std::size_t replica, const std::string& reason);

  /// Replicas the call still waits for (running, not busy).
  std::size_t awaited(const call& c) const;
  /// Handles one message for `c`; false when `deadline` passed first.
  bool receive_one(call& c, time_point deadline);
  bool take_deferred(call& c);
  bool is_active(std::uint64_t seq) const;
  /// True (and the message deferred or handled as late) if `msg` is not `c`'s.
  template <class Message>
  bool for_another_call(const call& c, Message& msg, std::vector<Message>& deferred);
  void handle(call& c, replica_result& msg);
  void handle(call& c, merge_request& msg);
  void merge(call& c);
  /// Records the call's first failure and unwinds the replicas in merge_call.
  void fail(call& c, std::exception_ptr error);
  void abort_merging(call& c);
  [[noreturn]] void fail_timed_out(call& c, std::chrono::milliseconds timeout);
  void on_late(const replica_result& msg);
  void on_late(const merge_request& msg);
  void drain_late_messages();
  void check_not_busy() const;

  detail::strategy_state& state_;
  std::shared_ptr<caf::actor_system> system_;
  caf::scoped_execution_unit context_;
  caf::strong_actor_ptr mailbox_;
  /// The mailbox actor, used from the thread that calls `run`.
  caf::blocking_actor* self_;
  std::vector<caf::actor> replicas_;
  bool stopped_ = false;
  std::string start_failure_;
  /// Per replica: the top-level call it is still running after that call
  /// timed out (0: idle). Busy replicas make later calls fail fast.
  std::vector<std::uint64_t> busy_;
  std::uint32_t timeline_track_; // the merge functions' row in the timeline
  std::uint64_t next_seq_ = 0;
  /// Replica messages taken from the mailbox so far (for its gather()).
  std::uint64_t taken_ = 0;
  /// The calls in progress, outermost first (nested runs inside merge
  /// functions add to it), and messages for the outer ones that arrived
  /// while an inner one was gathering.
  std::vector<std::uint64_t> active_;
  std::vector<replica_result> deferred_results_;
  std::vector<merge_request> deferred_requests_;
};

} // namespace lockstep::actors

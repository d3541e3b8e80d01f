#pragma once

// replica_actor: one per device of a mirrored strategy, created with the
// strategy and reused by every `run`. A blocking actor on its own thread,
// because replica functions are synchronous user code that pauses inside
// `merge_call`. CAF 0.17 has no typed blocking actors, so its protocol is
// documented here:
//
//   receives  run_message      run the function as call `seq` (also while
//                              paused in merge_call: a nested run issued by a
//                              merge function)
//             merge_reply      the result of the pending merge_call `seq`
//             abort_message    unwind merge_call waits of the given calls
//             exit_msg         stop (the strategy is being destroyed)
//   sends     merge_request    paused in merge_call during call `seq`
//             replica_result   call `seq` returned, threw, or was unwound

#include "actors/messages.hpp"
#include "actors/prompt_blocking_actor.hpp"

#include "replication/strategy_state.hpp"


#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

namespace lockstep::actors {

/// Thrown inside a replica function to unwind it when the strategy actor aborts
/// the call. Not a std::exception, so `catch (const std::exception&)` in
/// user code does not swallow it.
struct replica_aborted {};

class replica_actor final : public prompt_blocking_actor, public detail::merge_channel {
public:
  replica_actor(caf::actor_config& cfg, caf::actor strategy_actor,
                detail::strategy_state& state, std::size_t replica,
                std::chrono::microseconds spin);

  void act() override;

  const char* name() const override { return "replica_actor"; }


  /// merge_call of the replica function running on this actor's thread.
  std::any merge(std::any args, std::shared_ptr<const detail::merge_function> fn) override;

private:
  void execute(run_message& msg);
  bool aborted(std::uint64_t seq) const noexcept;

  caf::actor strategy_actor_;
  detail::strategy_state& state_;
  std::size_t replica_;
  std::uint32_t timeline_track_; // this replica's row in the timeline
  /// The context the replica functions run with (strategy_state::make_replica_context).
  std::shared_ptr<replica_context> context_;
  /// The innermost call running on this thread and its deadline per pause.
  std::uint64_t current_seq_ = 0;
  std::chrono::milliseconds current_timeout_{0};
  /// Calls whose merge_call waits must unwind; cleared when idle.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> aborted_;
  bool stopping_ = false;
};

} // namespace lockstep::actors

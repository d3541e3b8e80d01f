#include "actors/replica_actor.hpp"

#include "runtime/timeline.hpp"
#include "replication/call_numbering.hpp"
#include "replication/thread_mode.hpp"

#include "lockstep/error.hpp"

#include <caf/all.hpp>

#include <optional>

namespace lockstep::actors {

replica_actor::replica_actor(caf::actor_config& cfg, caf::actor strategy_actor,
                             detail::strategy_state& state, std::size_t replica,
                             std::chrono::microseconds spin)
  : prompt_blocking_actor(cfg, spin),
    strategy_actor_(std::move(strategy_actor)),
    state_(state),
    replica_(replica),
    timeline_track_(detail::timeline_track(
      detail::track_kind::replica,
      static_cast<std::uint32_t>(state.topology.global_replica_id(replica)))),
    context_(state.make_replica_context(replica, *this)) {}

void replica_actor::act() {
  receive_while([this] { return !stopping_; })(
    [this](run_message& msg) {
      execute(msg);
      aborted_.clear();
    },
    [](merge_reply&) {},   // the answer to a merge_call that was unwound
    [](abort_message&) {}, // nothing is waiting any more
    [this](caf::exit_msg& msg) {
      stopping_ = true;
      fail_state(std::move(msg.reason));
    });
}

void replica_actor::execute(run_message& msg) {
  const auto outer_seq = std::exchange(current_seq_, msg.seq);
  const auto outer_timeout = std::exchange(current_timeout_, msg.timeout);
  detail::replica_creations creations{msg.creations.get(), replica_};
  auto* const outer_creations = std::exchange(detail::current_replica_creations(), &creations);
  replica_result result{msg.seq, replica_, {}, {}, false};
  // The strategy actor's deadline decides stalls and reports them with the
  // collective's state, then cancels the collectives; the replicas' own
  // deadline, twice as long, is only a backstop.
  begin_collectives(detail::first_collective(msg.seq), 2 * msg.timeout, msg.seq);
  {
    detail::mode_guard mode{{&state_, context_.get(), replica_}};
    device_scope placement{state_.devices[replica_]};
    try {
      result.value = (*msg.fn)(*context_);
    } catch (const replica_aborted&) {
      result.aborted = true;
    } catch (...) {
      result.error = std::current_exception();
    }
  }
  if (replica_ == 0)
    creations.rendezvous->set_first_replica_paused(true); // returned: creates no more
  // Returned normally: replicas waiting for it in an all_reduce of this
  // call stop waiting (a different number of all_reduce calls, as TF's
  // merge_call check). A replica that threw does not depart: its exception
  // is the call's error, and the strategy actor's cancel unwinds the others.
  // An outer call's collectives go on in the outer call.
  if (const auto& communicator = state_.collectives.communicator) {
    if (!result.error && !result.aborted)
      communicator->session().depart(replica_, msg.seq);
    begin_collectives(0, 2 * outer_timeout, outer_seq);
  }
  detail::current_replica_creations() = outer_creations;
  current_seq_ = outer_seq;
  current_timeout_ = outer_timeout;
  send(strategy_actor_, std::move(result));
}

bool replica_actor::aborted(std::uint64_t seq) const noexcept {
  for (const auto& [first, last] : aborted_)
    if (first <= seq && seq <= last)
      return true;
  return false;
}

std::any replica_actor::merge(std::any args,
                              std::shared_ptr<const detail::merge_function> fn) {
  const auto seq = current_seq_;
  if (aborted(seq))
    throw replica_aborted{};
  // Replica 0 creates no variables while paused; the strategy actor resumes
  // it before it scatters the merge result.
  if (auto* creations = detail::current_replica_creations(); replica_ == 0 && creations)
    creations->rendezvous->set_first_replica_paused(true);
  detail::timeline_scope waiting{timeline_track_, "merge_call wait", "merge"};
  if (waiting.active())
    detail::timeline_flow(timeline_track_, detail::timeline_merge_flow(&state_, seq, replica_),
                          true, detail::timeline_now());
  send(strategy_actor_, merge_request{seq, replica_, std::move(args), std::move(fn)});
  // The strategy actor's deadline decides stalls. This one, twice as long and
  // restarted by every message from the strategy actor, only ends a wait for a
  // strategy actor that went silent (a merge function that never returns).
  const auto patience = 2 * current_timeout_;
  std::optional<std::any> reply;
  bool unwind = false;
  bool silent = false;
  while (!reply && !unwind && !silent) {
    receive(
      [&](merge_reply& msg) {
        if (msg.seq == seq)
          reply = std::move(msg.value);
      },
      [&](run_message& msg) { execute(msg); }, // nested run from the merge function
      [&](abort_message& msg) { aborted_.emplace_back(msg.first_seq, msg.last_seq); },
      [&](caf::exit_msg& msg) {
        stopping_ = true;
        fail_state(std::move(msg.reason));
      },
      caf::after(patience) >> [&] { silent = true; });
    unwind = stopping_ || aborted(seq);
  }
  if (reply) {
    // A nested call that failed while this one was paused cancelled the
    // collectives numbered below its end; carry on above them.
    if (const auto& communicator = state_.collectives.communicator)
      begin_collectives(communicator->session().cancelled_below(),
                                 2 * current_timeout_, seq);
    return std::move(*reply);
  }
  if (unwind)
    throw replica_aborted{};
  throw timeout_error(detail::describe_replica(state_, replica_)
                      + " heard nothing from the strategy actor for "
                      + std::to_string(patience.count()) + " ms while waiting in merge_call");
}

} // namespace lockstep::actors

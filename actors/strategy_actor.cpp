#include "actors/strategy_actor.hpp"

#include "actor_system/actor_system.hpp"
#include "actors/messages.hpp"
#include "actors/prompt_blocking_actor.hpp"
#include "actors/replica_actor.hpp"
#include "runtime/error_text.hpp"
#include "runtime/log.hpp"
#include "runtime/spin_wait.hpp"
#include "runtime/thread_start.hpp"
#include "runtime/timeline.hpp"
#include "replication/call_numbering.hpp"
#include "replication/thread_mode.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <optional>
#include <thread>

namespace lockstep::actors {

using clock = std::chrono::steady_clock;

namespace {

/// How long unwinding replicas (which only wait in a mailbox) get to report.
constexpr auto unwind_grace = std::chrono::seconds{5};

/// Removes and returns the first message of call `seq` in `messages`.
template <class Message>
std::optional<Message> take_message(std::vector<Message>& messages, std::uint64_t seq) {
  auto i = std::find_if(messages.begin(), messages.end(),
                        [seq](const Message& msg) { return msg.seq == seq; });
  if (i == messages.end())
    return std::nullopt;
  Message msg = std::move(*i);
  messages.erase(i);
  return msg;
}

/// The strategy actor's mailbox: never launched on a thread of its own; the
/// thread calling `run` receives from it, as with caf::scoped_actor.
class coordinator_mailbox final : public prompt_blocking_actor {
public:
  coordinator_mailbox(caf::actor_config& cfg, std::chrono::microseconds spin)
    : prompt_blocking_actor(cfg, spin) {
    setf(is_detached_flag);
  }

  void act() override {}

  const char* name() const override { return "strategy_actor"; }
};

/// "1st", "2nd", "3rd", "4th", ..., "11th", "21st".
std::string ordinal(std::size_t n) {
  const auto tens = n % 100;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th"
                       : n % 10 == 1              ? "st"
                       : n % 10 == 2              ? "nd"
                       : n % 10 == 3              ? "rd"
                                                  : "th";
  return std::to_string(n) + suffix;
}

} // namespace

/// The progress of one `run`: where each replica is. `stalled`: it timed out
/// in this call and is still running user code.
struct strategy_actor::call {
  enum class phase { running, merging, finished, stalled };

  call(std::uint64_t seq, std::size_t n)
    : seq(seq), phases(n, phase::running), values(n), requests(n),
      creations(std::make_shared<detail::creation_rendezvous>()) {}

  std::size_t count(phase p) const {
    return static_cast<std::size_t>(std::count(phases.begin(), phases.end(), p));
  }

  std::uint64_t seq;
  std::vector<phase> phases;
  std::vector<std::any> values;
  std::vector<merge_request> requests;
  /// The first exception; the call rethrows it once every replica stopped.
  std::exception_ptr failure;
  /// Where the replicas meet to create variables.
  std::shared_ptr<detail::creation_rendezvous> creations;
};

strategy_actor::strategy_actor(detail::strategy_state& state)
  : state_(state),
    system_(detail::shared_actor_system()),
    context_(system_.get()),
    busy_(state.devices.size(), 0),
    timeline_track_(detail::timeline_track(detail::track_kind::strategy_actor, 0)) {
  // Poll before sleeping only if every thread of the strategy has a core.
  const auto spin = detail::spin_budget(state.devices.size() + 1);
  caf::actor_config cfg{&context_};
  mailbox_ = caf::make_actor<coordinator_mailbox, caf::strong_actor_ptr>(
    system_->next_actor_id(), system_->node(), system_.get(), cfg, spin);
  self_ = static_cast<caf::blocking_actor*>(caf::actor_cast<caf::abstract_actor*>(mailbox_));
  auto me = caf::actor_cast<caf::actor>(mailbox_);
  replicas_.reserve(state.devices.size()); // a started replica is never out of the list
  for (std::size_t r = 0; r < state.devices.size(); ++r) {
    try {
      replicas_.push_back(spawn_replica(me, r, spin));
    } catch (const std::exception& e) {
      record_start_failure(r, e.what());
      return;
    }
  }
}

caf::actor strategy_actor::spawn_replica(const caf::actor& me, std::size_t r,
                                      std::chrono::microseconds spin) {
  if (const auto& hook = replica_start_hook())
    hook(r);
  // What actor_system::spawn does, in two steps, so that a failed launch
  // can be told from a failed construction.
  caf::actor_config cfg{system_->dummy_execution_unit()};
  cfg.flags |= caf::abstract_actor::is_detached_flag;
  auto replica = caf::make_actor<replica_actor, caf::actor>(
    system_->next_actor_id(), system_->node(), system_.get(), cfg, me, std::ref(state_), r, spin);
  try {
    static_cast<replica_actor*>(caf::actor_cast<caf::abstract_actor*>(replica))
      ->launch(cfg.host, false, false);
  } catch (...) {
    // std::thread failed (std::system_error, or std::bad_alloc for its
    // state) inside CAF's blocking_actor::launch, which had already counted
    // the thread as detached: without undoing that, the actor system would
    // wait for it forever when it shuts down. (The actor's registration is
    // undone by its own cleanup when its last handle goes.)
    system_->dec_detached_threads();
    throw;
  }
  return replica;
}

void strategy_actor::record_start_failure(std::size_t replica, const std::string& reason) {
  const auto started = replicas_.size();
  const bool stopped = stop();
  start_failure_ = state_.name() + ": could not start the thread of "
                   + detail::describe_replica(state_, replica) + ", the " + ordinal(replica + 1)
                   + " of " + std::to_string(state_.devices.size()) + " replicas: " + reason
                   + "; the " + std::to_string(started) + " replicas that had started "
                   + (stopped ? "were stopped" : "did not all stop in time")
                   + " (" + detail::thread_limits() + ")";
}

strategy_actor::~strategy_actor() {
  stop();
  self_->cleanup(caf::exit_reason::normal, &context_);
}

std::function<void(std::size_t)>& strategy_actor::replica_start_hook() {
  static std::function<void(std::size_t)> hook;
  return hook;
}

bool strategy_actor::stop() noexcept {
  if (stopped_)
    return true;
  for (const auto& r : replicas_) {
    self_->monitor(r);
    self_->send_exit(r, caf::exit_reason::user_shutdown);
  }
  std::size_t down = 0;
  const auto deadline = clock::now() + std::min<clock::duration>(state_.timeout, unwind_grace);
  bool timed_out = false;
  while (down < replicas_.size() && !timed_out) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - clock::now());
    self_->receive([&](caf::down_msg&) { ++down; },
                   [](replica_result&) {}, [](merge_request&) {},
                   caf::after(std::max(left, std::chrono::microseconds{0}))
                     >> [&] { timed_out = true; });
  }
  // A replica stuck in user code cannot be cancelled; its thread and the
  // actor system stay alive with the strategy's state (strategy_state::share).
  stopped_ = down == replicas_.size();
  return stopped_;
}

std::vector<std::any>
strategy_actor::run(std::shared_ptr<const detail::replica_function> fn,
                 std::chrono::milliseconds timeout) {
  drain_late_messages();
  check_not_busy();
  call c{++next_seq_, replicas_.size()};
  active_.push_back(c.seq);
  struct active_guard {
    std::vector<std::uint64_t>& active;
    ~active_guard() { active.pop_back(); }
  } guard{active_};
  for (const auto& r : replicas_)
    self_->send(r, run_message{c.seq, fn, timeout, c.creations});
  auto deadline = clock::now() + timeout;
  for (;;) {
    if (awaited(c) > 0) {
      if (!receive_one(c, deadline))
        fail_timed_out(c, timeout);
      continue;
    }
    if (c.failure)
      std::rethrow_exception(c.failure);
    if (c.count(call::phase::merging) == 0)
      return std::move(c.values);
    if (c.count(call::phase::finished) > 0) {
      std::vector<std::string> returned, waiting;
      for (std::size_t r = 0; r < c.phases.size(); ++r) {
        auto& list = c.phases[r] == call::phase::finished ? returned : waiting;
        list.push_back(detail::describe_replica(state_, r));
      }
      fail(c, std::make_exception_ptr(context_error(
                "Some replicas made a different number of replica_context().merge_call() "
                "calls. Returned: " + detail::joined_list(returned)
                + "; waiting in merge_call: " + detail::joined_list(waiting))));
      deadline = clock::now() + unwind_grace;
      continue;
    }
    merge(c);
    deadline = clock::now() + timeout;
  }
}

std::size_t strategy_actor::awaited(const call& c) const {
  std::size_t n = 0;
  for (std::size_t r = 0; r < c.phases.size(); ++r)
    if (c.phases[r] == call::phase::running && busy_[r] == 0)
      ++n;
  return n;
}

bool strategy_actor::receive_one(call& c, time_point deadline) {
  if (take_deferred(c))
    return true;
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - clock::now());
  if (left.count() <= 0)
    return false;
  // Each replica awaited sends one message: sleep until all are in (the
  // mailbox bounds the wait, see prompt_blocking_actor.hpp).
  static_cast<prompt_blocking_actor*>(self_)->gather(taken_ + awaited(c));
  bool timed_out = false;
  self_->receive([&](replica_result& msg) { ++taken_, handle(c, msg); },
                 [&](merge_request& msg) { ++taken_, handle(c, msg); },
                 caf::after(left) >> [&] { timed_out = true; });
  return !timed_out;
}

bool strategy_actor::take_deferred(call& c) {
  if (auto msg = take_message(deferred_results_, c.seq)) {
    handle(c, *msg);
    return true;
  }
  if (auto msg = take_message(deferred_requests_, c.seq)) {
    handle(c, *msg);
    return true;
  }
  return false;
}

bool strategy_actor::is_active(std::uint64_t seq) const {
  return std::find(active_.begin(), active_.end(), seq) != active_.end();
}

template <class Message>
bool strategy_actor::for_another_call(const call& c, Message& msg,
                                   std::vector<Message>& deferred) {
  if (msg.seq == c.seq)
    return false;
  // A call this one is nested in gets it when it resumes gathering.
  if (is_active(msg.seq))
    deferred.push_back(std::move(msg));
  else
    on_late(msg);
  return true;
}

void strategy_actor::handle(call& c, replica_result& msg) {
  if (for_another_call(c, msg, deferred_results_))
    return;
  if (busy_[msg.replica] == msg.seq)
    busy_[msg.replica] = 0; // its top-level call returned: it is free again
  c.phases[msg.replica] = call::phase::finished;
  if (msg.error && !c.failure)
    fail(c, msg.error);
  c.values[msg.replica] = std::move(msg.value);
}

void strategy_actor::handle(call& c, merge_request& msg) {
  if (for_another_call(c, msg, deferred_requests_))
    return;
  if (c.failure || c.phases[msg.replica] != call::phase::running) {
    // The call is unwinding (or gave up on this replica): unwind it too.
    self_->send(replicas_[msg.replica], abort_message{c.seq, c.seq});
    return;
  }
  c.phases[msg.replica] = call::phase::merging;
  c.requests[msg.replica] = std::move(msg);
}

void strategy_actor::merge(call& c) {
  std::vector<std::any> packs;
  packs.reserve(c.requests.size());
  for (auto& request : c.requests)
    packs.push_back(std::move(request.args));
  const auto fn = c.requests[0].fn; // TF runs the first replica's merge_fn
  std::vector<std::any> slices;
  try {
    detail::mode_guard mode{{&state_, nullptr}};
    detail::timeline_scope span{timeline_track_, "merge_fn", "merge"};
    if (span.active()) {
      const auto at = detail::timeline_now();
      for (std::size_t r = 0; r < c.requests.size(); ++r)
        detail::timeline_flow(timeline_track_,
                              detail::timeline_merge_flow(&state_, c.seq, c.requests[r].replica),
                              false, at);
    }
    slices = (*fn)(state_, packs);
    check_not_busy(); // a nested run inside the merge function timed out
  } catch (...) {
    fail(c, std::current_exception());
    return;
  }
  c.creations->set_first_replica_paused(false);
  for (std::size_t r = 0; r < replicas_.size(); ++r) {
    c.phases[r] = call::phase::running;
    self_->send(replicas_[r], merge_reply{c.seq, std::move(slices[r])});
  }
}

void strategy_actor::fail(call& c, std::exception_ptr error) {
  if (!c.failure)
    c.failure = std::move(error);
  abort_merging(c);
  // Replicas waiting in an all_reduce of this call (or a later nested one)
  // unwind too; calls after this one are numbered above the cancelled ones.
  if (const auto& communicator = state_.collectives.communicator)
    communicator->session().cancel_below(detail::first_collective(next_seq_ + 1),
                        std::make_exception_ptr(replica_aborted{}));
}

void strategy_actor::abort_merging(call& c) {
  for (std::size_t r = 0; r < c.phases.size(); ++r) {
    if (c.phases[r] != call::phase::merging)
      continue;
    c.phases[r] = call::phase::running; // until it reports that it unwound
    self_->send(replicas_[r], abort_message{c.seq, c.seq});
  }
}

void strategy_actor::fail_timed_out(call& c, std::chrono::milliseconds timeout) {
  std::vector<std::string> stalled, merging_replicas;
  auto* group = state_.collectives.communicator ? &state_.collectives.communicator->session()
                                                : nullptr;
  const auto first_collective = detail::first_collective(c.seq);
  for (std::size_t r = 0; r < c.phases.size(); ++r) {
    // A replica waiting in an all_reduce of this call is not stalled: the
    // cancel below unwinds it at once, as an abort does in merge_call.
    if (c.phases[r] == call::phase::running && busy_[r] == 0
        && !(group && group->waiting(r, first_collective))) {
      stalled.push_back(detail::describe_replica(state_, r));
      c.phases[r] = call::phase::stalled;
    } else if (c.phases[r] == call::phase::merging) {
      merging_replicas.push_back(detail::describe_replica(state_, r));
    }
  }
  const auto missing = detail::joined_list(stalled);
  const auto waiting = detail::joined_list(merging_replicas);
  LOCKSTEP_LOG_WARN("{}: {} still running after {} ms", state_.name(), missing, timeout.count());
  // Replicas waiting in an all_reduce for the others: name the collective
  // and who did not reach it, with the group's flight recorder.
  std::string collective;
  if (group)
    collective = group->stall_report(first_collective);
  const auto merging = waiting.empty() ? "" : " (waiting in merge_call: " + waiting + ")";
  fail(c, std::make_exception_ptr(timeout_error(
            "run timed out after " + std::to_string(timeout.count()) + " ms: "
            + (collective.empty() ? missing + " did not return or reach merge_call" + merging
                                  : collective + merging))));
  // Give the replicas that wait in merge_call time to unwind, so they are
  // free again; a stalled replica that returns meanwhile is free as well.
  const auto deadline = clock::now() + unwind_grace;
  while (awaited(c) > 0 && receive_one(c, deadline)) {
  }
  for (std::size_t r = 0; r < c.phases.size(); ++r)
    if (c.phases[r] == call::phase::running || c.phases[r] == call::phase::stalled)
      busy_[r] = active_.front(); // free once its top-level call returns
  std::rethrow_exception(c.failure);
}

void strategy_actor::on_late(const replica_result& msg) {
  auto& busy = busy_[msg.replica];
  if (busy == 0)
    return;
  if (msg.seq == busy) {
    busy = 0; // the timed-out call finally returned: the replica is free
    return;
  }
  // A nested call returned; unwind the merge_call waits it returns to.
  self_->send(replicas_[msg.replica], abort_message{busy, msg.seq - 1});
}

void strategy_actor::on_late(const merge_request& msg) {
  // A replica of a call that is over reached merge_call: unwind it.
  self_->send(replicas_[msg.replica], abort_message{msg.seq, msg.seq});
}

void strategy_actor::drain_late_messages() {
  if (std::all_of(busy_.begin(), busy_.end(), [](auto seq) { return seq == 0; }))
    return;
  bool empty = false;
  while (!empty)
    self_->receive([&](replica_result& msg) { ++taken_, on_late(msg); },
                   [&](merge_request& msg) { ++taken_, on_late(msg); },
                   caf::after(std::chrono::seconds{0}) >> [&] { empty = true; });
}

void strategy_actor::check_not_busy() const {
  std::string busy;
  for (std::size_t r = 0; r < busy_.size(); ++r)
    if (busy_[r] != 0)
      busy += (busy.empty() ? "" : ", ") + detail::describe_replica(state_, r);
  if (!busy.empty())
    throw timeout_error(busy + " still runs a replica function from a call that "
                        "timed out; the strategy accepts new calls once it returns");
}

} // namespace lockstep::actors

#include "coordinator.hpp"

#include "actor_system.hpp"
#include "messages.hpp"
#include "prompt_blocking_actor.hpp"
#include "replica_actor.hpp"
#include "log.hpp"
#include "thread_mode.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <mutex>
#include <thread>

#include <sched.h>

namespace lockstep::actors {

using clock = std::chrono::steady_clock;

namespace {

/// How long unwinding replicas (which only wait in a mailbox) get to report.
constexpr auto unwind_grace = std::chrono::seconds{5};

/// CPUs this process may run on (its affinity mask, e.g. a container's cpuset).
std::size_t usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return static_cast<std::size_t>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

/// The coordinator's mailbox: never launched on a thread of its own; the
/// thread calling `run` receives from it, as with caf::scoped_actor.
class coordinator_mailbox final : public prompt_blocking_actor {
public:
  coordinator_mailbox(caf::actor_config& cfg, std::chrono::microseconds spin)
    : prompt_blocking_actor(cfg, spin) {
    setf(is_detached_flag);
  }

  void act() override {}

  const char* name() const override { return "coordinator"; }
};

} // namespace

/// The progress of one `run`: where each replica is.
struct coordinator::call {
  enum class phase { running, merging, finished };

  call(std::uint64_t seq, std::size_t n)
    : seq(seq), phases(n, phase::running), values(n), requests(n) {}

  std::size_t count(phase p) const {
    return static_cast<std::size_t>(std::count(phases.begin(), phases.end(), p));
  }

  std::uint64_t seq;
  std::vector<phase> phases;
  std::vector<std::any> values;
  std::vector<merge_request> requests;
  /// The first exception; the call rethrows it once every replica stopped.
  std::exception_ptr failure;
};

coordinator::coordinator(detail::strategy_state& state)
  : state_(state),
    system_(shared_actor_system()),
    context_(system_.get()),
    busy_(state.devices.size(), 0) {
  // Poll before sleeping only if every thread of the strategy has a core.
  const auto threads = state.devices.size() + 1;
  const auto spin = threads <= usable_cpus()
                      ? get_runtime_options().spin_wait
                      : std::chrono::microseconds{0};
  caf::actor_config cfg{&context_};
  mailbox_ = caf::make_actor<coordinator_mailbox, caf::strong_actor_ptr>(
    system_->next_actor_id(), system_->node(), system_.get(), cfg, spin);
  self_ = static_cast<caf::blocking_actor*>(caf::actor_cast<caf::abstract_actor*>(mailbox_));
  auto me = caf::actor_cast<caf::actor>(mailbox_);
  for (std::size_t r = 0; r < state.devices.size(); ++r)
    replicas_.push_back(system_->spawn<replica_actor>(me, std::ref(state), r, spin));
}

coordinator::~coordinator() {
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
  if (down < replicas_.size()) {
    // A replica is stuck in user code and its thread cannot be cancelled.
    // Keep the actor system alive rather than block in its destructor.
    LOCKSTEP_LOG_ERROR("{}: {} replica thread(s) still run user code at shutdown; "
                       "leaving them running",
                       state_.name(), replicas_.size() - down);
    static auto* abandoned = new std::vector<std::shared_ptr<caf::actor_system>>;
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock{mutex};
    abandoned->push_back(system_); // never destroyed, on purpose
  }
  self_->cleanup(caf::exit_reason::normal, &context_);
}

std::vector<std::any>
coordinator::run(std::shared_ptr<const detail::replica_function> fn,
                 std::chrono::milliseconds timeout) {
  drain_late_messages();
  check_not_busy();
  call c{++next_seq_, replicas_.size()};
  if (depth_ == 0)
    top_seq_ = c.seq;
  ++depth_;
  struct depth_guard {
    int& depth;
    ~depth_guard() { --depth; }
  } guard{depth_};
  for (const auto& r : replicas_)
    self_->send(r, run_message{c.seq, fn, timeout});
  auto deadline = clock::now() + timeout;
  for (;;) {
    if (c.count(call::phase::running) > 0) {
      if (!receive_one(c, deadline))
        fail_timed_out(c, timeout);
      continue;
    }
    if (c.failure)
      std::rethrow_exception(c.failure);
    if (c.count(call::phase::merging) == 0)
      return std::move(c.values);
    if (c.count(call::phase::finished) > 0) {
      std::string returned, waiting;
      for (std::size_t r = 0; r < c.phases.size(); ++r) {
        auto& list = c.phases[r] == call::phase::finished ? returned : waiting;
        list += (list.empty() ? "" : ", ") + detail::describe_replica(state_, r);
      }
      c.failure = std::make_exception_ptr(context_error(
        "Some replicas made a different number of replica_context().merge_call() "
        "calls. Returned: " + returned + "; waiting in merge_call: " + waiting));
      abort_merging(c);
      deadline = clock::now() + unwind_grace;
      continue;
    }
    merge(c);
    deadline = clock::now() + timeout;
  }
}

bool coordinator::receive_one(call& c, time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - clock::now());
  if (left.count() <= 0)
    return false;
  bool timed_out = false;
  self_->receive(
    [&](replica_result& msg) {
      if (msg.seq != c.seq)
        return on_late(msg);
      c.phases[msg.replica] = call::phase::finished;
      if (msg.error && !c.failure) {
        c.failure = msg.error;
        abort_merging(c);
      }
      c.values[msg.replica] = std::move(msg.value);
    },
    [&](merge_request& msg) {
      if (msg.seq != c.seq)
        return on_late(msg);
      if (c.failure) { // the call is unwinding: this replica unwinds too
        self_->send(replicas_[msg.replica], abort_message{c.seq, c.seq});
        return;
      }
      c.phases[msg.replica] = call::phase::merging;
      c.requests[msg.replica] = std::move(msg);
    },
    caf::after(left) >> [&] { timed_out = true; });
  return !timed_out;
}

void coordinator::merge(call& c) {
  std::vector<std::any> packs;
  packs.reserve(c.requests.size());
  for (auto& request : c.requests)
    packs.push_back(std::move(request.args));
  const auto fn = c.requests[0].fn; // TF runs the first replica's merge_fn
  std::vector<std::any> slices;
  try {
    detail::mode_guard mode{{&state_, nullptr}};
    auto self = state_.handle();
    slices = (*fn)(self, packs);
  } catch (...) {
    c.failure = std::current_exception();
    abort_merging(c);
    return;
  }
  for (std::size_t r = 0; r < replicas_.size(); ++r) {
    c.phases[r] = call::phase::running;
    self_->send(replicas_[r], merge_reply{c.seq, std::move(slices[r])});
  }
}

void coordinator::abort_merging(call& c) {
  for (std::size_t r = 0; r < c.phases.size(); ++r) {
    if (c.phases[r] != call::phase::merging)
      continue;
    c.phases[r] = call::phase::running; // until it reports that it unwound
    self_->send(replicas_[r], abort_message{c.seq, c.seq});
  }
}

void coordinator::fail_timed_out(call& c, std::chrono::milliseconds timeout) {
  std::string missing, waiting;
  for (std::size_t r = 0; r < c.phases.size(); ++r) {
    if (c.phases[r] == call::phase::running) {
      missing += (missing.empty() ? "" : ", ") + detail::describe_replica(state_, r);
      busy_[r] = top_seq_;
      c.phases[r] = call::phase::finished;
    } else if (c.phases[r] == call::phase::merging) {
      waiting += (waiting.empty() ? "" : ", ") + detail::describe_replica(state_, r);
    }
  }
  if (!c.failure)
    c.failure = std::make_exception_ptr(timeout_error(
      "run timed out after " + std::to_string(timeout.count()) + " ms: " + missing
      + " did not return or reach merge_call"
      + (waiting.empty() ? "" : " (waiting in merge_call: " + waiting + ")")));
  LOCKSTEP_LOG_WARN("{}: {} still running after {} ms; marked busy", state_.name(),
                    missing, timeout.count());
  // Unwind the replicas that wait in merge_call, so they are free again.
  abort_merging(c);
  const auto deadline = clock::now() + unwind_grace;
  while (c.count(call::phase::running) > 0 && receive_one(c, deadline)) {
  }
  for (std::size_t r = 0; r < c.phases.size(); ++r)
    if (c.phases[r] == call::phase::running)
      busy_[r] = top_seq_;
  std::rethrow_exception(c.failure);
}

void coordinator::on_late(const replica_result& msg) {
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

void coordinator::on_late(const merge_request& msg) {
  // A replica of a call that is over reached merge_call: unwind it.
  self_->send(replicas_[msg.replica], abort_message{msg.seq, msg.seq});
}

void coordinator::drain_late_messages() {
  if (std::all_of(busy_.begin(), busy_.end(), [](auto seq) { return seq == 0; }))
    return;
  bool empty = false;
  while (!empty)
    self_->receive([&](replica_result& msg) { on_late(msg); },
                   [&](merge_request& msg) { on_late(msg); },
                   caf::after(std::chrono::seconds{0}) >> [&] { empty = true; });
}

void coordinator::check_not_busy() const {
  std::string busy;
  for (std::size_t r = 0; r < busy_.size(); ++r)
    if (busy_[r] != 0)
      busy += (busy.empty() ? "" : ", ") + detail::describe_replica(state_, r);
  if (!busy.empty())
    throw timeout_error(busy + " still runs a replica function from a call that "
                        "timed out; the strategy accepts new calls once it returns");
}

} // namespace lockstep::actors

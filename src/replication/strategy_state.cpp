// strategy_state: the shared state behind a strategy handle (see
// strategy_state.hpp): its lifetime, its device executors, and who may use
// its cross-replica API.

#include "replication/strategy_state.hpp"

#include "devices/device_registry.hpp"
#include "runtime/completion.hpp"

#include "runtime/error_text.hpp"
#include "runtime/timeline.hpp"

#include "lockstep/diagnostics.hpp"
#include "runtime/log.hpp"
#include "runtime/spin_wait.hpp"
#include "runtime/thread_start.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <algorithm>
#include <mutex>
#include <thread>

namespace lockstep::detail {

strategy_state::strategy_state(std::string name, detail::topology topology, bool replicated,
                               std::shared_ptr<cross_device_ops> ops,
                               std::chrono::milliseconds timeout)
  : topology(std::move(topology)),
    replicated(replicated),
    ops(std::move(ops)),
    timeout(timeout),
    name_(std::move(name)) {}

namespace {

/// Keeps `s` reachable and never frees it, on purpose.
void abandon(strategy_state* s) {
  static auto* abandoned = new std::vector<strategy_state*>;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock{mutex};
  abandoned->push_back(s);
}

/// Stops the replicas, then deletes the state; keeps it (never freed) when
/// a replica is stuck in user code that may still use it.
void destroy(strategy_state* s) {
  if (!s->executor || s->executor->stop()) {
    delete s;
    return;
  }
  LOCKSTEP_LOG_ERROR("{}: a replica thread still runs user code at shutdown; "
                     "its strategy is kept alive for it",
                     s->name());
  abandon(s);
}

} // namespace

std::shared_ptr<strategy_state> strategy_state::share(std::unique_ptr<strategy_state> made,
                                                      bool records) {
  // Before the replicas start, so that their first events count.
  const auto& topology = made->topology;
  const auto rank = topology.workers > 1 ? static_cast<std::int64_t>(topology.worker_index) : -1;
  if (records) {
    made->timeline = timeline_hold(rank);
    watch_dump_signal(); // for threads started from here on; resource_error
  }
  auto* state = made.release();
  return std::shared_ptr<strategy_state>(state, [](strategy_state* s) {
    // A posted write's captures may hold the last handle; an executor
    // cannot join its own thread, so another thread destroys the state.
    if (s->on_device_executor_thread()) {
      try {
        start_thread("destroying " + s->name(), [s] { destroy(s); }).detach();
      } catch (const std::exception& e) { // a deleter must not throw
        LOCKSTEP_LOG_ERROR("{}: {}; the strategy is kept, not destroyed", s->name(), e.what());
        abandon(s);
      }
    } else
      destroy(s);
  });
}

detail::device_executor& strategy_state::device_executor(std::size_t device) {
  std::lock_guard<std::mutex> lock{variables_mutex_};
  if (device_executors_.empty()) {
    // Replica threads are idle while posted writes run.
    const auto spin = spin_budget(devices.size() + 1);
    for (const auto& d : devices) {
      try {
        device_executors_.push_back(detail::executor_of(d, spin));
      } catch (const std::exception& e) { // resource_error, or std::bad_alloc
        const auto started = device_executors_.size();
        device_executors_.clear(); // lets go of those started here
        throw resource_error(name() + ": " + e.what() + " (" + std::to_string(started) + " of "
                             + std::to_string(devices.size())
                             + " device executors had started and were released)");
      }
    }
  }
  return *device_executors_.at(device);
}

detail::device_executor& strategy_state::device_executor(const device_spec& device) {
  const auto key = device.canonical();
  const auto replica = std::find(devices.begin(), devices.end(), key);
  if (replica != devices.end())
    return device_executor(static_cast<std::size_t>(replica - devices.begin()));
  std::lock_guard<std::mutex> lock{variables_mutex_};
  for (const auto& e : other_executors_)
    if (e->device().canonical() == key)
      return *e;
  other_executors_.push_back(detail::executor_of(key, spin_budget(devices.size() + 1)));
  return *other_executors_.back();
}

bool strategy_state::on_device_executor_thread() const {
  std::lock_guard<std::mutex> lock{variables_mutex_};
  const auto here = [](const auto& e) { return e->on_this_thread(); };
  return std::any_of(device_executors_.begin(), device_executors_.end(), here)
         || std::any_of(other_executors_.begin(), other_executors_.end(), here);
}

void strategy_state::drain_device_executors() {
  std::vector<detail::device_executor*> executors;
  {
    std::lock_guard<std::mutex> lock{variables_mutex_};
    for (const auto& e : device_executors_)
      executors.push_back(e.get());
    for (const auto& e : other_executors_)
      executors.push_back(e.get());
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // One sleep for all executors, ended by the last one to finish (as a
  // thread pool's join would), instead of one sleep per executor and a
  // wake-up per batch each of them runs meanwhile.
  auto drained = std::make_shared<completion>(executors.size());
  for (auto* e : executors)
    e->when_drained([drained] { drained->done(nullptr); });
  if (drained->wait(deadline))
    return;
  for (auto* e : executors)
    if (!e->drain(std::chrono::steady_clock::now()))
      throw timeout_error(name() + ": the writes posted to " + e->device().to_string()
                          + " did not finish within " + std::to_string(timeout.count())
                          + " ms");
}

void strategy_state::record_write_failure(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock{variables_mutex_};
  if (!write_failure_)
    write_failure_ = std::move(error);
}

std::exception_ptr strategy_state::take_write_failure() {
  std::lock_guard<std::mutex> lock{variables_mutex_};
  return std::exchange(write_failure_, nullptr);
}

std::chrono::milliseconds checked_timeout(std::chrono::milliseconds timeout, const char* what) {
  if (timeout.count() <= 0 || timeout > runtime_options::max_timeout)
    throw value_error(std::string{what} + ": the timeout must be greater than 0 and at most 1e9 s, got "
                      + std::to_string(timeout.count()) + " ms");
  return timeout;
}

bool strategy_state::is_default() const noexcept {
  return this == &default_strategy_state();
}

user_claim::user_claim(strategy_state& state) : state_(state) {
  const auto me = std::this_thread::get_id();
  auto expected = std::thread::id{};
  if (!state.user.compare_exchange_strong(expected, me) && expected != me)
    throw context_error(state.name() + " is in use by another thread: a "
                        "strategy's cross-replica API is used from one thread "
                        "at a time");
  ++state.user_depth;
}

user_claim::~user_claim() {
  if (--state_.user_depth == 0)
    state_.user.store(std::thread::id{});
}

bool in_dispatch(const strategy_state& state) noexcept {
  // Only call_for_each_replica claims a strategy, for the whole call.
  return state.user.load() == std::this_thread::get_id();
}

std::string describe_replica(const strategy_state& state, std::size_t replica) {
  std::string out = "replica " + std::to_string(replica);
  if (replica < state.devices.size())
    out += " (" + state.devices[replica].to_string() + ")";
  return out;
}

} // namespace lockstep::detail

#include "actor_system/actor_system.hpp"

#include "actor_system/wire_format.hpp"
#include "runtime/thread_start.hpp"

#include "lockstep/error.hpp"
#include "lockstep/runtime_options.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lockstep::detail {

namespace {

/// Every layer's message types, in the order their registrars ran. A
/// function's static, so that registrars in other files may run first.
std::vector<message_types>& registered_message_types() {
  static std::vector<message_types> types;
  return types;
}

/// This layer's own serialisable type: errors, which every layer may send.
void add_error_value_type(caf::actor_system_config& config) {
  config.add_message_type<error_value>("lockstep.error_value");
}

const message_types_registrar error_value_type{&add_error_value_type};

/// Throws resource_error unless `needed` more threads can be started now.
/// CAF's actor system starts its scheduler's threads in its constructor and
/// cannot stop the ones it started when a later one fails (the process
/// would terminate), so the headroom is tried first: `needed` threads that
/// wait until all exist. They are joined and, before returning, reaped by
/// the kernel, so that the threads they stood in for fit under the same
/// limit (ulimit -u, a cgroup's pids.max). A best effort, not a guarantee:
/// another process of the same user can take the room in between.
void check_thread_headroom(std::size_t needed) {
  const auto before = threads_of_this_process();
  std::mutex mutex;
  std::condition_variable released;
  bool release = false;
  std::vector<std::thread> probes;
  probes.reserve(needed); // nothing but a thread start can fail below
  std::string failure;
  for (std::size_t i = 0; i < needed && failure.empty(); ++i) {
    try {
      probes.emplace_back([&] {
        std::unique_lock<std::mutex> lock{mutex};
        released.wait(lock, [&] { return release; });
      });
    } catch (const std::exception& e) { // std::system_error, or std::bad_alloc
      failure = e.what();
    }
  }
  {
    std::lock_guard<std::mutex> lock{mutex};
    release = true;
  }
  released.notify_all();
  const auto started = probes.size();
  for (auto& t : probes)
    t.join();
  if (!failure.empty())
    throw resource_error("lockstep cannot start its actor system: it needs " + std::to_string(needed)
                         + " threads, and only " + std::to_string(started)
                         + " could be started: " + failure + " (" + thread_limits()
                         + ")");
  // A joined thread leaves the count (and frees its slot under the limit)
  // a moment after join returns.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{1};
  while (before != 0 && threads_of_this_process() > before
         && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds{100});
}

/// The config must outlive the system, which keeps a reference to it.
struct system_with_config {
  explicit system_with_config(const runtime_options& options)
    : config(make_config(options)), system(config) {}

  static std::size_t scheduler_threads(const runtime_options& options) {
    auto threads = options.scheduler_threads;
    if (threads == 0)
      threads = std::max(1u, std::thread::hardware_concurrency());
    return threads;
  }

  static caf::actor_system_config make_config(const runtime_options& options) {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", scheduler_threads(options));
    cfg.set("scheduler.policy", caf::atom_from_string(options.scheduler_policy));
    cfg.set("work-stealing.moderate-sleep-duration",
            caf::timespan{options.scheduler_moderate_sleep});
    for (const auto add : registered_message_types())
      add(cfg);
    return cfg;
  }

  caf::actor_system_config config;
  caf::actor_system system;
};

} // namespace

message_types_registrar::message_types_registrar(message_types types) {
  registered_message_types().push_back(types);
}

std::shared_ptr<caf::actor_system> shared_actor_system() {
  static std::mutex mutex;
  static std::weak_ptr<caf::actor_system> current;
  std::lock_guard<std::mutex> lock{mutex};
  if (auto existing = current.lock())
    return existing;
  const auto& options = get_runtime_options();
  // The scheduler's workers, its timer thread (caf.clock) and CAF's printer
  // actor (a detached caf.actor), all started by the system's constructor.
  check_thread_headroom(system_with_config::scheduler_threads(options) + 2);
  auto holder = std::make_shared<system_with_config>(options);
  std::shared_ptr<caf::actor_system> system{holder, &holder->system};
  current = system;
  return system;
}

} // namespace lockstep::detail

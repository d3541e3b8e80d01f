#include "actor_system.hpp"

#include "lockstep/runtime_options.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

#include <mutex>
#include <thread>

namespace lockstep::actors {

namespace {

/// The config must outlive the system, which keeps a reference to it.
struct system_with_config {
  explicit system_with_config(const runtime_options& options)
    : config(make_config(options)), system(config) {}

  static caf::actor_system_config make_config(const runtime_options& options) {
    caf::actor_system_config cfg;
    auto threads = options.scheduler_threads;
    if (threads == 0)
      threads = std::max(1u, std::thread::hardware_concurrency());
    cfg.set("scheduler.max-threads", threads);
    cfg.set("scheduler.policy", caf::atom_from_string(options.scheduler_policy));
    cfg.set("work-stealing.moderate-sleep-duration",
            caf::timespan{options.scheduler_moderate_sleep});
    return cfg;
  }

  caf::actor_system_config config;
  caf::actor_system system;
};

} // namespace

std::shared_ptr<caf::actor_system> shared_actor_system() {
  static std::mutex mutex;
  static std::weak_ptr<caf::actor_system> current;
  std::lock_guard<std::mutex> lock{mutex};
  if (auto existing = current.lock())
    return existing;
  auto holder = std::make_shared<system_with_config>(get_runtime_options());
  std::shared_ptr<caf::actor_system> system{holder, &holder->system};
  current = system;
  return system;
}

} // namespace lockstep::actors

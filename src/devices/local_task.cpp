#include "devices/local_task.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace lockstep::detail {

namespace {

const task_name localhost{"localhost", 0};

// The current name; null: localhost. Names are never freed, so a
// reference handed out stays valid after a later setting.
std::atomic<const task_name*> current{nullptr};

bool is_job_name(const std::string& job) {
  const auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  return !job.empty() && letter(job.front())
         && std::all_of(job.begin(), job.end(), [&](char c) {
              return letter(c) || (c >= '0' && c <= '9') || c == '_';
            });
}

} // namespace

const task_name& local_task() noexcept {
  const auto* name = current.load(std::memory_order_acquire);
  return name != nullptr ? *name : localhost;
}

void set_local_task(const task_name& name) {
  if (!is_job_name(name.job) || name.task < 0)
    throw value_error("cannot name this process's devices /job:" + name.job + "/replica:0/task:"
                      + std::to_string(name.task)
                      + ": the job must be a letter followed by letters, digits or '_', and "
                        "the task not negative");
  static std::mutex mutex;
  static std::vector<std::unique_ptr<const task_name>> kept;
  std::lock_guard<std::mutex> lock{mutex};
  if (local_task() == name)
    return;
  kept.push_back(std::make_unique<const task_name>(name));
  current.store(kept.back().get(), std::memory_order_release);
}

} // namespace lockstep::detail

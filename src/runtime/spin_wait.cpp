#include "runtime/spin_wait.hpp"

#include "lockstep/runtime_options.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

#include <sched.h>

namespace lockstep::detail {

std::size_t usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return static_cast<std::size_t>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::chrono::microseconds spin_budget(std::size_t threads) {
  return threads <= usable_cpus() ? get_runtime_options().spin_wait
                                  : std::chrono::microseconds{0};
}

host_spin spin_on_this_host() {
  // "0.52 0.58 0.59 3/467 12345": the fourth field is runnable/all.
  std::FILE* file = std::fopen("/proc/loadavg", "r");
  if (file == nullptr)
    return {};
  unsigned long runnable = 0;
  const bool read = std::fscanf(file, "%*s %*s %*s %lu/", &runnable) == 1;
  std::fclose(file);
  return read ? spin_for_runnable(runnable, get_runtime_options().spin_wait) : host_spin{};
}

host_spin spin_for_runnable(std::size_t runnable, std::chrono::microseconds spin_wait) {
  return {spin_wait, runnable > usable_cpus()};
}

} // namespace lockstep::detail

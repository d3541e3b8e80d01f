#include "runtime/spin_wait.hpp"

#include "lockstep/runtime_options.hpp"

#include <algorithm>
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

} // namespace lockstep::detail

#include "transport/shm/shared_wait.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <climits>

namespace lockstep::detail {

namespace {

/// How long a waiter that may not poll yields its CPU before it sleeps.
constexpr std::chrono::microseconds yield_phase{200};

/// Sleeps while `word` holds `seen`, at most `limit`; a shared futex (not
/// FUTEX_PRIVATE_FLAG): its sleepers and wakers are other processes.
void futex_sleep(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                 std::chrono::nanoseconds limit) noexcept {
  timespec timeout{};
  timeout.tv_sec = static_cast<time_t>(limit.count() / 1'000'000'000);
  timeout.tv_nsec = static_cast<long>(limit.count() % 1'000'000'000);
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &timeout,
            nullptr, 0);
}

} // namespace

void wake_all(shared_wake_word& word) noexcept {
  word.value.fetch_add(1, std::memory_order_seq_cst);
  if (word.sleepers.load(std::memory_order_seq_cst) != 0)
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word.value), FUTEX_WAKE, INT_MAX,
              nullptr, nullptr, 0);
}

wait_end wait_on(shared_wake_word& word, const std::function<bool()>& ready,
                 const std::function<bool()>& stopped,
                 std::chrono::steady_clock::time_point deadline, std::chrono::microseconds spin,
                 std::chrono::milliseconds check_every) {
  using clock = std::chrono::steady_clock;
  if (ready())
    return wait_end::ready;
  const auto spin_until = clock::now() + spin;
  while (clock::now() < spin_until) {
    for (int i = 0; i < 64; ++i) {
      if (ready())
        return wait_end::ready;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
  // Processes that outnumber the CPUs do not poll: they yield their CPU
  // for a while first, to the process that will produce what they wait
  // for (often on this CPU), as Open MPI's yield_when_idle does, then
  // sleep.
  if (spin.count() == 0) {
    const auto yield_until = clock::now() + yield_phase;
    while (clock::now() < yield_until) {
      if (ready())
        return wait_end::ready;
      ::sched_yield();
    }
  }
  for (;;) {
    // Read the word before the condition: a wake after this read changes
    // it, so the sleep below returns at once instead of missing the wake.
    const auto seen = word.value.load(std::memory_order_seq_cst);
    if (ready())
      return wait_end::ready;
    if (stopped())
      return wait_end::stopped;
    const auto now = clock::now();
    if (now >= deadline)
      return wait_end::deadline;
    word.sleepers.fetch_add(1, std::memory_order_seq_cst);
    futex_sleep(word.value, seen, std::min<clock::duration>(deadline - now, check_every));
    word.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

} // namespace lockstep::detail

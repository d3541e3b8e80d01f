#pragma once

// Waits between processes on a word of shared memory: a waiter polls for
// its spin budget (only while every waiting process has a CPU; else it
// yields its CPU for a moment instead), then sleeps on the word (a futex shared between processes) in slices of at
// most `check_every`, so that it looks at its deadline and at whether the
// group broke between sleeps: a dead process never wakes it, and a wait
// never outlives its deadline.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

namespace lockstep::detail {

/// The word processes sleep on, and how many sleep on it now (so that a
/// waker skips the system call when nobody sleeps).
struct shared_wake_word {
  std::atomic<std::uint32_t> value{0};
  std::atomic<std::uint32_t> sleepers{0};
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free,
              "a 32-bit atomic in shared memory must be lock-free (address-free)");

/// Changes the word (every process's sleep on it ends) and wakes its
/// sleepers. Call after publishing what they wait for.
void wake_all(shared_wake_word& word) noexcept;

/// How a wait ended.
enum class wait_end { ready, deadline, stopped };

/// Waits until `ready()` is true (ready), `stopped()` is true (stopped),
/// or `deadline` passes (deadline), whichever comes first; checks them at
/// least every `check_every`. Polls for `spin` first; with no spin budget
/// (more waiting processes than CPUs) it yields its CPU for 200 us first.
wait_end wait_on(shared_wake_word& word, const std::function<bool()>& ready,
                 const std::function<bool()>& stopped,
                 std::chrono::steady_clock::time_point deadline, std::chrono::microseconds spin,
                 std::chrono::milliseconds check_every = std::chrono::milliseconds{10});

} // namespace lockstep::detail

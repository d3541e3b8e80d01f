#pragma once

// device_executor: the thread of one device that runs the variable copies
// placed on it (variables/variable_copy.hpp). Writes to a distributed variable
// are posted to the executor of each of its devices, so the copies are
// updated in parallel, one thread per device, while the caller goes on.
//
// Tasks run one at a time in the order they were posted (FIFO). A task must
// not throw; variable copies catch and record their writes' failures. The
// executor is lockstep's own code, not a CAF actor: CAF's scheduler neither
// keeps work on one thread per device nor wakes fast enough for one message
// per variable write, and the executor is tested under ThreadSanitizer.
// (A GPU device's executor is this thread too: it launches the writes on the
// device's CUDA stream, docs/gpu.md.)

#include "lockstep/device_spec.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace lockstep::detail {

/// A posted task: a move-only `void()` callable. Callables of up to
/// `inline_size` bytes (a variable copy's write, a non-slot update) are held
/// in place, so posting one allocates nothing; larger ones go to the heap.
class executor_task {
public:
  static constexpr std::size_t inline_size = 64;

  executor_task() noexcept = default;

  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, executor_task>>>
  executor_task(F&& fn) { // NOLINT(google-explicit-constructor): posted lambdas convert
    using callable = std::decay_t<F>;
    if constexpr (sizeof(callable) <= inline_size
                  && alignof(callable) <= alignof(std::max_align_t)
                  && std::is_nothrow_move_constructible_v<callable>) {
      ::new (static_cast<void*>(storage_)) callable(std::forward<F>(fn));
      ops_ = &inline_ops<callable>;
    } else {
      ::new (static_cast<void*>(storage_)) callable*(new callable(std::forward<F>(fn)));
      ops_ = &heap_ops<callable>;
    }
  }

  executor_task(executor_task&& other) noexcept : ops_(other.ops_) {
    if (ops_ != nullptr) {
      ops_->move(other.storage_, storage_);
      other.ops_ = nullptr;
    }
  }

  executor_task& operator=(executor_task&& other) noexcept {
    if (this != &other) {
      reset();
      if (other.ops_ != nullptr) {
        other.ops_->move(other.storage_, storage_);
        ops_ = std::exchange(other.ops_, nullptr);
      }
    }
    return *this;
  }

  executor_task(const executor_task&) = delete;
  executor_task& operator=(const executor_task&) = delete;

  ~executor_task() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }

  void operator()() { ops_->call(storage_); }

private:
  struct operations {
    void (*call)(void* storage);
    /// Move-constructs into `to` and destroys the source.
    void (*move)(void* from, void* to) noexcept;
    void (*destroy)(void* storage) noexcept;
  };

  template <class C>
  static constexpr operations inline_ops{
    [](void* s) { (*static_cast<C*>(s))(); },
    [](void* from, void* to) noexcept {
      ::new (to) C(std::move(*static_cast<C*>(from)));
      static_cast<C*>(from)->~C();
    },
    [](void* s) noexcept { static_cast<C*>(s)->~C(); }};

  template <class C>
  static constexpr operations heap_ops{
    [](void* s) { (**static_cast<C**>(s))(); },
    [](void* from, void* to) noexcept { ::new (to) C*(*static_cast<C**>(from)); },
    [](void* s) noexcept { delete *static_cast<C**>(s); }};

  void reset() noexcept {
    if (ops_ != nullptr)
      std::exchange(ops_, nullptr)->destroy(storage_);
  }

  alignas(std::max_align_t) std::byte storage_[inline_size];
  const operations* ops_ = nullptr;
};

class device_executor {
public:
  using task = executor_task;
  using time_point = std::chrono::steady_clock::time_point;

  /// Starts the thread (resource_error when it cannot). `spin`: how long it
  /// polls for work before sleeping.
  device_executor(device_spec device, std::chrono::microseconds spin);

  /// The process's executor of `device` (by type and index), shared by all
  /// that works on that device (variable copies, reducers) and started on
  /// first use with `spin`; it stops when the last user lets go. One thread
  /// per device keeps the device's work in one order.
  static std::shared_ptr<device_executor> of(const device_spec& device,
                                             std::chrono::microseconds spin);

  /// Runs every task posted so far, then stops the thread. Must not run on
  /// the executor's own thread (owners hand that case to another thread).
  ~device_executor();

  device_executor(const device_executor&) = delete;
  device_executor& operator=(const device_executor&) = delete;

  void post(task work);

  /// Waits until every task posted before this call has run; false if
  /// `deadline` passed first. Called on the executor's own thread it returns
  /// true at once: the tasks before the running one have run.
  bool drain(time_point deadline);

  /// Calls `on_drained` once every task posted before this call has run:
  /// right here when none is pending (or on the executor's own thread),
  /// else on the executor's thread after the batch that ran the last of
  /// them (a batch may hold tasks posted later too). It must not throw. Lets one thread wait for several executors
  /// with one sleep and one wake-up (strategy_state::drain_device_executors).
  void when_drained(task on_drained);

  /// True on the executor's own thread.
  bool on_this_thread() const noexcept {
    return std::this_thread::get_id() == thread_id_;
  }

  const device_spec& device() const noexcept { return device_; }

private:
  void loop();
  /// Polls `queued_` up to `spin_`; true when work arrived.
  bool poll_for_work() const;

  const device_spec device_;
  const std::chrono::microseconds spin_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable progress_;
  /// Posted tasks not yet taken; the loop swaps it with its own batch
  /// vector, so both keep their capacity and a post allocates nothing.
  std::vector<task> queue_;
  std::atomic<std::uint64_t> queued_{0}; // posted, for polling without the lock
  std::uint64_t posted_ = 0;
  std::uint64_t done_ = 0;
  std::size_t draining_ = 0; // threads waiting in drain()
  /// when_drained callbacks, each with the count of tasks it waits for.
  std::vector<std::pair<std::uint64_t, task>> on_drained_;
  /// The thread sleeps and nobody has woken it yet: the first post after it
  /// fell asleep wakes it (and clears this), later ones need not.
  bool sleeping_ = false;
  bool stopping_ = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

} // namespace lockstep::detail

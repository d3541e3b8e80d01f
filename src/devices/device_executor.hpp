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
// (A GPU device's executor will own its stream when the CUDA backend lands.)

#include "lockstep/device_spec.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace lockstep::detail {

class device_executor {
public:
  using task = std::function<void()>;
  using time_point = std::chrono::steady_clock::time_point;

  /// Starts the thread. `spin`: how long it polls for work before sleeping.
  device_executor(device_spec device, std::chrono::microseconds spin);

  /// The process's executor of `device` (canonical), shared by everything
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
  std::deque<task> queue_;
  std::atomic<std::uint64_t> queued_{0}; // posted, for polling without the lock
  std::uint64_t posted_ = 0;
  std::uint64_t done_ = 0;
  std::size_t draining_ = 0; // threads waiting in drain()
  bool sleeping_ = false;
  bool stopping_ = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

} // namespace lockstep::detail

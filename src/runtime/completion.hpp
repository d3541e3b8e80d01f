#pragma once

// A countdown of tasks that run on other threads (device executors), with
// the first exception any of them reported.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>

namespace lockstep::detail {

class completion {
public:
  explicit completion(std::size_t tasks) : left_(tasks) {}

  /// One task finished, with `error` if it threw.
  void done(std::exception_ptr error) {
    bool last;
    {
      std::lock_guard<std::mutex> lock{mutex_};
      if (error && !error_)
        error_ = std::move(error);
      last = --left_ == 0;
    }
    if (last) // waiters wait for all: wake them once
      finished_.notify_all();
  }

  /// Waits until every task finished; false if `deadline` passed first.
  bool wait(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock{mutex_};
    return finished_.wait_until(lock, deadline, [this] { return left_ == 0; });
  }

  /// The first exception a task reported, if any.
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock{mutex_};
    return error_;
  }

private:
  std::mutex mutex_;
  std::condition_variable finished_;
  std::size_t left_;
  std::exception_ptr error_;
};

} // namespace lockstep::detail

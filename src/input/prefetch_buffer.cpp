#include "input/prefetch_buffer.hpp"

#include "runtime/timeline.hpp"

#include "lockstep/error.hpp"

#include <string>
#include <utility>

namespace lockstep::detail {

prefetch_buffer::prefetch_buffer(producer produce) : produce_(std::move(produce)) {}

bool prefetch_buffer::produce_one() {
  {
    std::lock_guard<std::mutex> lock{mutex_};
    if (cancelled_ || ended_)
      return false;
    producing_ = true;
  }
  // Unlocked: the producer is user code. The consumer never touches
  // produce_ while producing_ is set.
  std::shared_ptr<void> element;
  std::exception_ptr error;
  {
    const auto track
      = timeline_on() ? timeline_track(track_kind::input, 1, "input actor") : 0;
    timeline_scope span{track, "produce", "input"};
    try {
      element = produce_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  producer orphaned; // destroyed after unlocking
  bool more = false;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    producing_ = false;
    if (cancelled_) {
      // A late element is dropped. If the consumer gave up waiting for this
      // call, the producer is ours to destroy; otherwise the consumer,
      // woken below, destroys it on its thread.
      if (abandoned_)
        orphaned = std::move(produce_);
    } else if (error) {
      error_ = std::move(error);
      ended_ = true;
    } else if (!element) {
      ended_ = true;
    } else {
      ++produced_;
      ready_.push_back(std::move(element));
      more = true;
    }
  }
  changed_.notify_all();
  return more;
}

std::shared_ptr<void> prefetch_buffer::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock{mutex_};
  if (!changed_.wait_for(lock, timeout, [this] { return !ready_.empty() || ended_; }))
    throw timeout_error("prefetch: the input actor produced no element within "
                        + std::to_string(timeout.count()) + " ms (it has produced "
                        + std::to_string(produced_) + " elements so far)");
  if (!ready_.empty()) {
    auto element = std::move(ready_.front());
    ready_.pop_front();
    return element;
  }
  if (error_)
    std::rethrow_exception(std::exchange(error_, nullptr));
  return nullptr;
}

bool prefetch_buffer::cancel(std::chrono::milliseconds timeout) {
  producer produce;
  std::deque<std::shared_ptr<void>> unconsumed;
  bool stopped = false;
  {
    std::unique_lock<std::mutex> lock{mutex_};
    cancelled_ = true;
    stopped = changed_.wait_for(lock, timeout, [this] { return !producing_; });
    if (stopped)
      produce = std::move(produce_);
    else
      abandoned_ = true;
    unconsumed.swap(ready_);
  }
  return stopped;
}

std::uint64_t prefetch_buffer::produced() const {
  std::lock_guard<std::mutex> lock{mutex_};
  return produced_;
}

std::size_t prefetch_buffer::ready() const {
  std::lock_guard<std::mutex> lock{mutex_};
  return ready_.size();
}

} // namespace lockstep::detail

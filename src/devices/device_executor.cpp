#include "devices/device_executor.hpp"

#include "runtime/log.hpp"
#include "runtime/thread_start.hpp"

#include <exception>
#include <map>
#include <string>
#include <utility>

namespace lockstep::detail {

device_executor::device_executor(device_spec device, std::chrono::microseconds spin)
  : device_(std::move(device)), spin_(spin) {
  thread_ = start_thread("the executor of " + device_.to_string(), [this] { loop(); });
  thread_id_ = thread_.get_id();
}

std::shared_ptr<device_executor> device_executor::of(const device_spec& device,
                                                     std::chrono::microseconds spin) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<device_executor>> executors;
  // One executor per device of this process, whatever its task is named
  // (/job:localhost before a multi-worker strategy names it, after it
  // /job:worker/replica:0/task:k): keyed by type and index.
  const auto canonical = device.canonical();
  const auto name = *canonical.device_type() + ":" + std::to_string(*canonical.device_index());
  std::lock_guard<std::mutex> lock{mutex};
  auto& slot = executors[name];
  if (auto existing = slot.lock())
    return existing;
  auto created = std::make_shared<device_executor>(canonical, spin);
  slot = created;
  return created;
}

device_executor::~device_executor() {
  {
    std::lock_guard<std::mutex> lock{mutex_};
    stopping_ = true;
  }
  wake_.notify_one();
  if (on_this_thread()) {
    LOCKSTEP_LOG_ERROR("device_executor({}) destroyed by one of its own tasks",
                       device_.to_string());
    std::terminate(); // joining itself would deadlock; see the header
  }
  thread_.join();
}

void device_executor::post(task work) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    queue_.push_back(std::move(work));
    ++posted_;
    queued_.store(posted_, std::memory_order_release);
    wake = std::exchange(sleeping_, false); // one wake-up per sleep
  }
  if (wake)
    wake_.notify_one();
}

bool device_executor::drain(time_point deadline) {
  if (on_this_thread())
    return true;
  std::unique_lock<std::mutex> lock{mutex_};
  const auto target = posted_;
  ++draining_;
  const bool done = progress_.wait_until(lock, deadline, [&] { return done_ >= target; });
  --draining_;
  return done;
}

void device_executor::when_drained(task on_drained) {
  if (!on_this_thread()) {
    std::lock_guard<std::mutex> lock{mutex_};
    if (done_ < posted_) {
      on_drained_.emplace_back(posted_, std::move(on_drained));
      return;
    }
  }
  on_drained();
}

bool device_executor::poll_for_work() const {
  if (spin_.count() == 0)
    return false;
  const auto seen = queued_.load(std::memory_order_acquire);
  const auto until = std::chrono::steady_clock::now() + spin_;
  do {
    for (int i = 0; i < 64; ++i)
      if (queued_.load(std::memory_order_acquire) != seen)
        return true;
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

void device_executor::loop() {
  std::vector<task> batch;
  std::vector<task> drained;
  std::unique_lock<std::mutex> lock{mutex_};
  for (;;) {
    if (queue_.empty()) {
      if (stopping_)
        return;
      lock.unlock();
      const bool arrived = poll_for_work();
      lock.lock();
      if (!arrived && queue_.empty() && !stopping_) {
        sleeping_ = true;
        wake_.wait(lock, [this] { return !queue_.empty() || stopping_; });
        sleeping_ = false; // woken by stopping_, or by a spurious wake-up
      }
      continue;
    }
    batch.swap(queue_);
    lock.unlock();
    const auto count = batch.size();
    for (auto& work : batch)
      work();
    batch.clear(); // destroys the tasks' captures before the next wait; keeps capacity
    lock.lock();
    done_ += count;
    if (draining_ > 0)
      progress_.notify_all();
    if (!on_drained_.empty()) {
      // Targets grow in registration order: the due ones come first.
      auto due = on_drained_.begin();
      while (due != on_drained_.end() && due->first <= done_)
        drained.push_back(std::move((due++)->second));
      on_drained_.erase(on_drained_.begin(), due);
      if (!drained.empty()) {
        lock.unlock();
        for (auto& callback : drained)
          callback();
        drained.clear();
        lock.lock();
      }
    }
  }
}

} // namespace lockstep::detail

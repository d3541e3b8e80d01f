#pragma once

// variable_copy: one copy of a variable on one device. It owns the copy's
// tensor, and it is the only one that changes it: writes are messages that
// it applies one at a time in sequence order.
//
// Protocol (plain C++ calls, no CAF: the copies run on their device's
// executor, see device_executor.hpp):
//
//   post(seq, write)     write number `seq` of the variable; writes 1, 2, 3...
//                        are each posted to every copy exactly once, by any
//                        number of threads, and every copy applies them in
//                        seq order (early arrivals wait, parked), so the
//                        copies never diverge. Applied on the device's
//                        executor, or on the posting thread when there is
//                        none (a one-device variable).
//   apply_local(fn)      a write to this copy alone (sync-on-read writes in
//                        replica context, writes inside update()), applied
//                        on the calling thread after the writes it must
//                        follow.
//   read(seq)            a snapshot after write `seq`.
//
// A read never sees half a write: readers wait while a write is applied, and
// a write that finds its buffer shared with a snapshot writes to a new
// buffer instead (copy on write), so snapshots never change. A write that
// throws is recorded (failure()) and the copy goes on with the next one: the
// variable reports it at its next synchronisation point.
//
// Waits end at a deadline with timeout_error naming the variable, the copy
// and the write it waited for. On the executor's own thread (inside a task,
// e.g. a write that reads another variable) reads and local writes do not
// wait for posted writes: the executor runs tasks in posting order, so every
// write posted before the running one was already delivered.

#include "lockstep/tensor.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace lockstep::detail {

class device_executor;

/// A write to a variable, shared by the copies it is posted to.
class variable_write {
public:
  virtual ~variable_write() = default;

  /// Applies the write to copy `copy`, whose value the caller holds
  /// exclusively. May throw.
  virtual void apply(std::size_t copy, tensor& value) const = 0;

  /// False when the write replaces the value without reading it.
  virtual bool reads_value() const noexcept { return true; }

  /// True when the write makes the copy equal to the other copies whatever
  /// they held before (an assign): it clears a recorded failure.
  virtual bool overwrites() const noexcept { return false; }
};

/// A posted write that threw.
struct write_failure {
  std::uint64_t seq;
  std::exception_ptr error;
};

class variable_copy : public std::enable_shared_from_this<variable_copy> {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Copy `copy` of the variable `name`, holding `initial` (not copied).
  /// `executor`: the device's executor, or nullptr to apply posted writes on
  /// the posting thread.
  variable_copy(std::string name, std::size_t copy, tensor initial,
                 device_executor* executor);

  void post(std::uint64_t seq, std::shared_ptr<const variable_write> write);

  /// Applies `fn` to this copy alone, after write `after_seq`. Exceptions
  /// from `fn` propagate and are not recorded.
  void apply_local(const std::function<void(tensor&)>& fn, std::uint64_t after_seq,
                   time_point deadline);

  /// The value after write `after_seq` (or a later one).
  tensor read(std::uint64_t after_seq, time_point deadline) const;

  /// Waits until write `seq` was applied (successfully or not).
  void wait_applied(std::uint64_t seq, time_point deadline) const;

  /// The first write that threw since the last overwrite, if any.
  std::optional<write_failure> failure() const;
  /// Whether failure() is set, without taking the copy's lock (the check
  /// every write makes). A failure recorded before a wait on this copy
  /// returned (wait_applied, read) is seen.
  bool has_failure() const noexcept { return failed_.load(std::memory_order_acquire); }
  void clear_failure();

  std::size_t copy() const noexcept { return copy_; }
  /// "variable 'w' copy 1 (/job:localhost/replica:0/task:0/device:CPU:1)"
  std::string describe() const;

private:
  using lock_type = std::unique_lock<std::mutex>;

  void deliver(std::uint64_t seq, std::shared_ptr<const variable_write> write);
  /// Applies parked writes while the next one in sequence is there.
  void apply_parked(lock_type& lock);
  void apply_posted(lock_type& lock, const variable_write& write);
  /// Takes the copy for writing; the caller then writes `value_` unlocked.
  void begin_write(lock_type& lock, bool reads_value);
  void end_write(lock_type& lock);
  bool written_by_this_thread() const noexcept;
  /// Waits until no other thread writes and write `after_seq` was applied.
  void wait_turn(lock_type& lock, std::uint64_t after_seq, time_point deadline,
                 const char* what) const;

  const std::string name_;
  const std::size_t copy_;
  const std::string value_device_;
  const std::uint32_t timeline_track_; // its device's variables row in the timeline
  device_executor* const executor_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  tensor value_;
  std::uint64_t applied_ = 0;
  bool writing_ = false;
  std::thread::id writer_;
  std::map<std::uint64_t, std::shared_ptr<const variable_write>> parked_;
  std::optional<write_failure> failure_;
  std::atomic<bool> failed_{false}; // failure_.has_value(), set under mutex_
};

} // namespace lockstep::detail

#include "variables/variable_copy.hpp"

#include "devices/device_executor.hpp"
#include "runtime/timeline.hpp"

#include "lockstep/error.hpp"

#include <optional>
#include <utility>

namespace lockstep::detail {

namespace {

/// "CPU:0" for "/job:localhost/replica:0/task:0/device:CPU:0": a timeline
/// row's name.
std::string short_name(const std::string& device) {
  const auto at = device.rfind("device:");
  return at == std::string::npos ? device : device.substr(at + 7);
}

} // namespace

variable_copy::variable_copy(std::string name, std::size_t copy, tensor initial,
                               device_executor* executor)
  : name_(std::move(name)),
    copy_(copy),
    value_device_(initial.device().to_string()),
    timeline_track_(
      timeline_track(track_kind::variables, 0, "variables " + short_name(value_device_))),
    executor_(executor),
    value_(std::move(initial)) {}

std::string variable_copy::describe() const {
  return "variable '" + name_ + "' copy " + std::to_string(copy_) + " ("
         + value_device_ + ")";
}

void variable_copy::post(std::uint64_t seq, std::shared_ptr<const variable_write> write) {
  if (executor_ == nullptr) {
    deliver(seq, std::move(write));
    return;
  }
  executor_->post([self = shared_from_this(), seq, write = std::move(write),
                   step = timeline_on() ? timeline_step() : -1]() mutable {
    std::optional<timeline_step_scope> posted_in; // only while a timeline records
    if (step >= 0)
      posted_in.emplace(step);
    self->deliver(seq, std::move(write));
  });
}

void variable_copy::deliver(std::uint64_t seq, std::shared_ptr<const variable_write> write) {
  lock_type lock{mutex_};
  if (writing_ || seq != applied_ + 1) {
    // Early (another poster's write comes first) or the copy is being
    // written: whoever finishes the write in progress applies it.
    parked_.emplace(seq, std::move(write));
    return;
  }
  apply_posted(lock, *write);
  apply_parked(lock);
  changed_.notify_all();
}

void variable_copy::apply_parked(lock_type& lock) {
  while (!writing_ && !parked_.empty() && parked_.begin()->first == applied_ + 1) {
    auto write = std::move(parked_.begin()->second);
    parked_.erase(parked_.begin());
    apply_posted(lock, *write);
  }
}

void variable_copy::apply_posted(lock_type& lock, const variable_write& write) {
  begin_write(lock, write.reads_value());
  std::exception_ptr error;
  {
    timeline_scope span{timeline_track_, "update", "variable"};
    if (span.active())
      timeline_args::copy(span.args.label, name_);
    try {
      write.apply(copy_, value_);
    } catch (...) {
      error = std::current_exception();
    }
  }
  lock.lock();
  ++applied_;
  if (error && !failure_) {
    failure_ = write_failure{applied_, std::move(error)};
    failed_.store(true, std::memory_order_release);
  } else if (!error && write.overwrites() && failure_) {
    failure_.reset();
    failed_.store(false, std::memory_order_release);
  }
  writing_ = false;
  writer_ = {};
}

void variable_copy::begin_write(lock_type& lock, bool reads_value) {
  writing_ = true;
  writer_ = std::this_thread::get_id();
  lock.unlock();
  // Nobody else touches value_ while writing_ is set, and a buffer held by
  // value_ alone cannot gain a reader now, so the count is stable here.
  if (value_.buffer_use_count() > 1) {
    value_ = reads_value ? value_.copy()
                         : tensor::zeros(value_.dtype(), value_.shape(), value_.device());
  } else {
    // use_count() is a relaxed load: seeing 1 does not order the last reads
    // through a snapshot dropped on another thread before this write.
    // Dropping a copy of the handle does: its decrement is an acquire-release
    // read-modify-write of the count, so it synchronises with the release
    // decrements that dropped the snapshots.
    const tensor probe = value_;
  }
}

void variable_copy::end_write(lock_type& lock) {
  lock.lock();
  writing_ = false;
  writer_ = {};
  apply_parked(lock);
  changed_.notify_all();
}

bool variable_copy::written_by_this_thread() const noexcept {
  return writing_ && writer_ == std::this_thread::get_id();
}

void variable_copy::wait_turn(lock_type& lock, std::uint64_t after_seq,
                               time_point deadline, const char* what) const {
  // On the executor's thread, every write posted before the running task
  // was delivered already; waiting for a parked one would deadlock.
  const bool on_executor = executor_ != nullptr && executor_->on_this_thread();
  const bool ready = changed_.wait_until(lock, deadline, [&] {
    return !writing_ && (applied_ >= after_seq || on_executor);
  });
  if (!ready)
    throw timeout_error(describe() + ": " + what + " waited in vain for write "
                        + std::to_string(after_seq) + " (applied: "
                        + std::to_string(applied_)
                        + (writing_ ? ", a write is in progress)" : ")"));
}

void variable_copy::apply_local(const std::function<void(tensor&)>& fn,
                                 std::uint64_t after_seq, time_point deadline) {
  lock_type lock{mutex_};
  if (written_by_this_thread()) { // inside this copy's own write
    lock.unlock();
    fn(value_);
    return;
  }
  wait_turn(lock, after_seq, deadline, "a local write");
  begin_write(lock, true);
  try {
    fn(value_);
  } catch (...) {
    end_write(lock);
    throw;
  }
  end_write(lock);
}

tensor variable_copy::read(std::uint64_t after_seq, time_point deadline) const {
  lock_type lock{mutex_};
  if (written_by_this_thread())
    return value_;
  wait_turn(lock, after_seq, deadline, "a read");
  return value_;
}

void variable_copy::wait_applied(std::uint64_t seq, time_point deadline) const {
  lock_type lock{mutex_};
  if (!changed_.wait_until(lock, deadline, [&] { return applied_ >= seq; }))
    throw timeout_error(describe() + ": write " + std::to_string(seq)
                        + " was not applied in time (applied: "
                        + std::to_string(applied_) + ")");
}

std::optional<write_failure> variable_copy::failure() const {
  std::lock_guard<std::mutex> lock{mutex_};
  return failure_;
}

void variable_copy::clear_failure() {
  std::lock_guard<std::mutex> lock{mutex_};
  failure_.reset();
  failed_.store(false, std::memory_order_release);
}

} // namespace lockstep::detail

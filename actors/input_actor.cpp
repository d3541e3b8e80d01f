#include "actors/input_actor.hpp"

#include "actors/detached_actor.hpp"

#include "runtime/timeline.hpp"

#include "lockstep/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <string>
#include <utility>

namespace lockstep::actors {

// -- prefetch_buffer --------------------------------------------------------------

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
    const auto track = detail::timeline_on()
                         ? detail::timeline_track(detail::track_kind::input, 1, "input actor")
                         : 0;
    detail::timeline_scope span{track, "produce", "input"};
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

// -- the actor --------------------------------------------------------------------

namespace {

class input_actor final : public detached_actor {
public:
  input_actor(caf::actor_config& cfg, std::shared_ptr<prefetch_buffer> buffer)
    : detached_actor(cfg), buffer_(std::move(buffer)) {}

  caf::behavior make_behavior() override {
    return {
      [this](input_demand demand) {
        for (std::uint64_t i = 0; i < demand.count; ++i) {
          if (!buffer_->produce_one()) {
            quit();
            return;
          }
        }
      },
    };
  }

  const char* name() const override { return "input_actor"; }

private:
  std::shared_ptr<prefetch_buffer> buffer_;
};

} // namespace

caf::actor spawn_input_actor(caf::actor_system& system, std::shared_ptr<prefetch_buffer> buffer,
                             std::uint64_t initial_demand) {
  auto actor = spawn_detached<input_actor>(system, "the input actor (dataset prefetch)",
                                           std::move(buffer));
  caf::anon_send(actor, input_demand{initial_demand});
  return actor;
}

} // namespace lockstep::actors

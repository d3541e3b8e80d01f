#pragma once

// prompt_blocking_actor: a CAF blocking actor whose sleeping reader is woken
// without contention. CAF 0.17's blocking mailbox signals the reader's
// condition variable while holding the mutex the reader must take next, so
// every wake-up costs the reader a second sleep (two more futex calls). This
// base signals after unlocking; the mailbox protocol itself (try_block, then
// `blocked()` checked under the mutex) is CAF's own. Before sleeping, the
// reader may poll its mailbox for a short while (runtime_options::spin_wait)
// when it has a hardware thread to itself: a sleeping vCPU takes tens of
// microseconds to wake. The replica actors and the strategy actor's mailbox use
// it: their messages are the dispatch path.
//
// A reader that gathers one reply from each of N senders can ask to sleep
// once rather than N times (gather()): its next wait then returns when the
// messages it expects have all arrived, or at the latest after
// `gather_window`, whichever is first, so a reply that needs attention at
// once (a failure) waits at most that long. With 8 replicas on 2 CPUs this
// saves the strategy actor up to 7 wake-ups per phase of a call.

#include <caf/blocking_actor.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace lockstep::actors {

class prompt_blocking_actor : public caf::blocking_actor {
public:
  /// `spin`: how long `await_data` polls before it sleeps (0: never).
  prompt_blocking_actor(caf::actor_config& cfg, std::chrono::microseconds spin)
    : caf::blocking_actor(cfg), spin_(spin) {}

  /// A closed mailbox (the actor stopped) deletes the message. lockstep
  /// never sends requests to these actors, so no sender awaits an answer.
  void enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit* host) override;
  void await_data() override;
  bool await_data(timeout_type timeout) override;

  /// How long a gathering wait holds back the messages that did arrive.
  static constexpr std::chrono::milliseconds gather_window{1};

  /// The next wait for data returns once `total` messages have been
  /// enqueued since the actor started (or after gather_window, or at its
  /// own deadline), instead of at the first message. A `total` the reader
  /// overestimates costs it at most the window; one it underestimates only
  /// wakes it early.
  void gather(std::uint64_t total) noexcept { gather_until_ = total; }

private:
  /// Polls until a message is there (true) or `until` passes (false).
  bool poll_until(timeout_type until);
  /// The gathering wait; true when a message is there.
  bool await_gathered(timeout_type until);

  const std::chrono::microseconds spin_;
  /// Messages enqueued so far, ever.
  std::atomic<std::uint64_t> pushed_{0};
  /// The reader's gather() target (its own thread only); 0: none.
  std::uint64_t gather_until_ = 0;
  /// The target while the reader sleeps in a gathering wait; 0: not.
  std::atomic<std::uint64_t> gathering_{0};
  std::mutex wake_mutex_;
  std::condition_variable wake_;
};

} // namespace lockstep::actors

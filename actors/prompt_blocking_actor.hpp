#pragma once

// prompt_blocking_actor: a CAF blocking actor whose sleeping reader is woken
// without contention. CAF 0.17's blocking mailbox signals the reader's
// condition variable while holding the mutex the reader must take next, so
// every wake-up costs the reader a second sleep (two more futex calls). This
// base signals after unlocking; the mailbox protocol itself (try_block, then
// `blocked()` checked under the mutex) is CAF's own. Before sleeping, the
// reader may poll its mailbox for a short while (runtime_options::spin_wait)
// when it has a hardware thread to itself: a sleeping vCPU takes tens of
// microseconds to wake. The replica actors and the coordinator's mailbox use
// it: their messages are the dispatch path.

#include <caf/blocking_actor.hpp>

#include <chrono>
#include <condition_variable>
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

private:
  /// Polls until a message is there (true) or `until` passes (false).
  bool poll_until(timeout_type until);

  const std::chrono::microseconds spin_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
};

} // namespace lockstep::actors

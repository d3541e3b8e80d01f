#pragma once

// detached_actor: the base of lockstep's event-based actors that run on a
// thread of their own (CAF's `detached` spawn option: the input actor, the
// node actor), started so that a thread that cannot be created is one
// resource_error and leaves nothing behind.
//
// CAF 0.17's scheduled_actor::launch registers a detached actor with the
// actor system, then makes its private_thread, whose constructor counts a
// detached thread and takes a reference to the actor for it, and only then
// creates the std::thread. When that throws (a limit on threads), none of it
// is undone: the actor can never be destroyed, and ~actor_system waits
// forever for the actor and the thread that never ran. start() undoes it.

#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>

#include <string_view>

namespace lockstep::detail {

class detached_actor : public caf::event_based_actor {
public:
  /// `cfg` must carry caf::abstract_actor::is_detached_flag (make_config).
  explicit detached_actor(caf::actor_config& cfg);

  /// A config for caf::make_actor of a detached actor of `system`.
  static caf::actor_config make_config(caf::actor_system& system);

  /// Launches the actor on its own thread, once, right after make_actor.
  /// Throws resource_error naming `what` ("the input actor") when the thread
  /// cannot be created; then the actor is as if never launched, and goes
  /// with its last handle.
  void start(std::string_view what);
};

/// Makes an actor of type `Actor` (a detached_actor) with `args` and starts
/// it (detached_actor::start, which names it `what`).
template <class Actor, class... Ts>
caf::actor spawn_detached(caf::actor_system& system, std::string_view what, Ts&&... args) {
  auto cfg = detached_actor::make_config(system);
  auto handle = caf::make_actor<Actor, caf::actor>(system.next_actor_id(), system.node(), &system,
                                                   cfg, std::forward<Ts>(args)...);
  static_cast<detached_actor*>(caf::actor_cast<caf::abstract_actor*>(handle))->start(what);
  return handle;
}

} // namespace lockstep::detail

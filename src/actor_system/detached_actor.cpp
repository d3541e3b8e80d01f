#include "actor_system/detached_actor.hpp"

#include "runtime/thread_start.hpp"

#include "lockstep/error.hpp"

#include <caf/actor_system.hpp>
#include <caf/detail/private_thread.hpp>

#include <exception>

namespace lockstep::detail {

detached_actor::detached_actor(caf::actor_config& cfg) : caf::event_based_actor(cfg) {}

caf::actor_config detached_actor::make_config(caf::actor_system& system) {
  caf::actor_config cfg{system.dummy_execution_unit()};
  cfg.flags |= caf::abstract_actor::is_detached_flag;
  return cfg;
}

void detached_actor::start(std::string_view what) {
  try {
    if (const auto& hook = detail::thread_start_hook())
      hook(what);
    launch(home_system().dummy_execution_unit(), false, false);
  } catch (const std::exception& e) { // std::system_error, std::bad_alloc, the hook's
    if (private_thread_ != nullptr) {
      // What the private_thread's constructor did for the thread that never
      // ran: it counted a detached thread and took a reference to this
      // actor (the caller's handle keeps it alive here).
      home_system().dec_detached_threads();
      delete private_thread_;
      private_thread_ = nullptr;
      intrusive_ptr_release(ctrl());
    }
    // No thread to stop when the last handle goes: cleanup() (which also
    // undoes the registration) stops a detached actor's thread.
    unsetf(is_detached_flag);
    throw resource_error(detail::thread_start_failure(what, e.what()));
  }
}

} // namespace lockstep::detail

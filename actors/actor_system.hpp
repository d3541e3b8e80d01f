#pragma once

// The process's CAF actor system: created on first use from
// runtime_options, shared by every strategy, destroyed when the last
// strategy using it is gone.

#include <caf/fwd.hpp>

#include <memory>

namespace lockstep::actors {

std::shared_ptr<caf::actor_system> shared_actor_system();

} // namespace lockstep::actors

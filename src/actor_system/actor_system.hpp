#pragma once

// The process's CAF actor system: created on first use from
// runtime_options, shared by every strategy and node, destroyed when the
// last one using it is gone.
//
// Each layer with serialisable messages registers its own types, from a
// namespace-scope message_types_registrar in the .cpp that encodes or
// handles them (node/control_messages.cpp, actors/input_actor.cpp), so
// that this layer below them names none of their types. A system takes the
// types registered when it is made; every registrar runs before main().

#include <caf/fwd.hpp>

#include <memory>

namespace lockstep::detail {

/// Adds one layer's serialisable message types to an actor system's config
/// (config.add_message_type<T>("lockstep.<type>") for each).
using message_types = void (*)(caf::actor_system_config&);

/// Registers `types` for every actor system shared_actor_system() makes.
class message_types_registrar {
public:
  explicit message_types_registrar(message_types types);
};

std::shared_ptr<caf::actor_system> shared_actor_system();

} // namespace lockstep::detail

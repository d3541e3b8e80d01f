#include "actors/messages.hpp"

#include <caf/actor_system_config.hpp>

namespace lockstep::actors {

void register_messages(caf::actor_system_config& config) {
  // Serialisable messages only (actors/wire_messages.hpp, input_demand);
  // the local-only ones are never registered.
  config.add_message_type<input_demand>("lockstep.input_demand")
    .add_message_type<error_value>("lockstep.error_value")
    .add_message_type<join_request>("lockstep.join_request")
    .add_message_type<join_reply>("lockstep.join_reply")
    .add_message_type<member>("lockstep.member")
    .add_message_type<membership>("lockstep.membership")
    .add_message_type<heartbeat>("lockstep.heartbeat")
    .add_message_type<collective_control>("lockstep.collective_control")
    .add_message_type<collective_abort>("lockstep.collective_abort")
    .add_message_type<collective_progress>("lockstep.collective_progress")
    .add_message_type<variable_created>("lockstep.variable_created");
}

} // namespace lockstep::actors

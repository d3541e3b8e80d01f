#include "node/control_messages.hpp"

#include "node/wire_format.hpp"

#include "actor_system/actor_system.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <string>
#include <vector>

namespace lockstep::detail {

namespace {

const message_types_registrar node_message_types{&add_node_message_types};

} // namespace

void add_node_message_types(caf::actor_system_config& config) {
  config.add_message_type<join_request>("lockstep.join_request")
    .add_message_type<join_reply>("lockstep.join_reply")
    .add_message_type<member>("lockstep.member")
    .add_message_type<membership>("lockstep.membership")
    .add_message_type<heartbeat>("lockstep.heartbeat")
    .add_message_type<collective_control>("lockstep.collective_control")
    .add_message_type<collective_abort>("lockstep.collective_abort")
    .add_message_type<collective_progress>("lockstep.collective_progress")
    .add_message_type<variable_created>("lockstep.variable_created");
}

const char* to_string(control_kind kind) noexcept {
  switch (kind) {
    case control_kind::join_request:
      return "join_request";
    case control_kind::join_reply:
      return "join_reply";
    case control_kind::membership:
      return "membership";
    case control_kind::heartbeat:
      return "heartbeat";
    case control_kind::collective_abort:
      return "collective_abort";
    case control_kind::clock_probe:
      return "clock_probe";
    case control_kind::clock_reply:
      return "clock_reply";
    case control_kind::collective_progress:
      return "collective_progress";
  }
  return "unknown";
}

template <class Message>
void send_control(tcp_socket& socket, const Message& message, io_clock::time_point deadline) {
  std::vector<char> buffer;
  caf::binary_serializer sink{nullptr, buffer};
  auto copy = message; // CAF's serializer takes its arguments by non-const reference
  if (auto error = sink(copy))
    throw bad_control_message(std::string("cannot serialise a ") + to_string(control_kind_of<Message>::value)
                              + ": " + caf::to_string(error));
  write_frame(socket, static_cast<std::uint32_t>(control_kind_of<Message>::value),
              {reinterpret_cast<const std::uint8_t*>(buffer.data()), buffer.size()}, deadline);
}

template <class Message>
Message decode_control(const frame& f) {
  const auto expected = control_kind_of<Message>::value;
  if (f.kind != static_cast<std::uint32_t>(expected))
    throw bad_control_message(std::string("expected a ") + to_string(expected)
                              + " frame, got one of kind " + std::to_string(f.kind));
  Message message;
  caf::binary_deserializer source{nullptr, reinterpret_cast<const char*>(f.payload.data()),
                                  f.payload.size()};
  if (auto error = source(message))
    throw bad_control_message(std::string("a malformed ") + to_string(expected) + ": "
                              + caf::to_string(error));
  if (source.remaining() != 0)
    throw bad_control_message(std::string("a ") + to_string(expected) + " with "
                              + std::to_string(source.remaining()) + " trailing bytes");
  return message;
}

#define LOCKSTEP_CONTROL_MESSAGE(type)                                                      \
  template void send_control<type>(tcp_socket&, const type&,                \
                                           io_clock::time_point);                           \
  template type decode_control<type>(const frame&);

LOCKSTEP_CONTROL_MESSAGE(join_request)
LOCKSTEP_CONTROL_MESSAGE(join_reply)
LOCKSTEP_CONTROL_MESSAGE(membership)
LOCKSTEP_CONTROL_MESSAGE(heartbeat)
LOCKSTEP_CONTROL_MESSAGE(collective_abort)
LOCKSTEP_CONTROL_MESSAGE(collective_progress)

#undef LOCKSTEP_CONTROL_MESSAGE

} // namespace lockstep::detail

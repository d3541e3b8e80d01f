#pragma once

// The messages of the control plane (wire_messages.hpp) as frames on an
// authenticated connection: one frame kind per message type, the payload
// CAF's binary serialisation of the struct (the inspect() functions of
// wire_format.hpp). CAF appears only in the .cpp, which also registers the
// types with the actor system: callers see plain structs and bytes.

#include "node/wire_messages.hpp"
#include "transport/tcp/frame.hpp"

#include <cstdint>
#include <stdexcept>

namespace lockstep::detail {

/// The most a control frame may carry: a membership of max_world_size
/// workers with host names of 255 bytes fits. Control frames come only from
/// authenticated peers (a join_request's, before, is capped far lower:
/// pending_join.hpp); a length prefix beyond this costs nothing (frame.hpp).
inline constexpr std::size_t max_control_payload = 32 << 20;

enum class control_kind : std::uint32_t {
  join_request = 1,
  join_reply = 2,
  membership = 3,
  heartbeat = 4,
  collective_abort = 5,
  // The clock exchange after the membership (clock_sync.hpp): raw
  // little-endian numbers, not CAF-serialised structs.
  clock_probe = 6,
  clock_reply = 7,
  collective_progress = 8,
};

/// A frame that is not the message expected, or does not deserialise.
class bad_control_message : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The frame kind of each message type.
template <class Message>
struct control_kind_of;
template <>
struct control_kind_of<join_request> {
  static constexpr auto value = control_kind::join_request;
};
template <>
struct control_kind_of<join_reply> {
  static constexpr auto value = control_kind::join_reply;
};
template <>
struct control_kind_of<membership> {
  static constexpr auto value = control_kind::membership;
};
template <>
struct control_kind_of<heartbeat> {
  static constexpr auto value = control_kind::heartbeat;
};
template <>
struct control_kind_of<collective_abort> {
  static constexpr auto value = control_kind::collective_abort;
};
template <>
struct control_kind_of<collective_progress> {
  static constexpr auto value = control_kind::collective_progress;
};

/// "join_request", ...: for messages.
const char* to_string(control_kind kind) noexcept;

/// Writes `message` as one frame. Throws as write_frame.
template <class Message>
void send_control(tcp_socket& socket, const Message& message, io_clock::time_point deadline);

/// The message in `f`. Throws bad_control_message when `f` is of another
/// kind or its payload is not exactly one such message.
template <class Message>
Message decode_control(const frame& f);

/// Reads one frame and decodes it as `Message`. Throws as read_frame and
/// decode_control.
template <class Message>
Message receive_control(tcp_socket& socket, io_clock::time_point deadline) {
  return decode_control<Message>(read_frame(socket, max_control_payload, deadline));
}

} // namespace lockstep::detail

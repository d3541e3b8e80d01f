// Fuzz target: the decoder of control messages (node/control_messages.hpp),
// CAF's binary deserialisation of the structs of node/wire_messages.hpp.
//
// Input: one byte that picks the message type (its value modulo 6; from
// 0xf0 on, the frame's kind is the next 4 bytes instead of the type's, as
// when a peer sends one message where another is expected), then the
// frame's payload. Guarantees checked:
//   - decode_control either returns a message or throws
//     bad_control_message; nothing else escapes, and nothing crashes;
//   - a message it returns survives send_control and decode_control again
//     unchanged (so what was accepted is exactly what a peer could send);
//   - it allocates in proportion to the bytes it was given (libFuzzer's
//     -malloc_limit_mb, and replay_main's operator new, catch a length
//     field that asks for more).

#include "fuzz_messages.hpp"

#include <exception>

using namespace lockstep;
using namespace lockstep::detail;

namespace {

template <class Message>
void round_trip(const Message& decoded) {
  boost::asio::io_context context;
  auto [near, far] = fuzz::connected_pair(context);
  send_control(near, decoded, fuzz::hang_deadline());
  const auto again = receive_control<Message>(far, fuzz::hang_deadline());
  if (!(again == decoded))
    fuzz::broken(std::string("a decoded ") + to_string(control_kind_of<Message>::value)
                 + " changed when sent and decoded again");
}

template <class Message>
void decode(std::uint32_t kind, std::span<const std::uint8_t> payload) {
  Message decoded;
  try {
    decoded = decode_control<Message>(frame{kind, {payload.begin(), payload.end()}});
  } catch (const bad_control_message&) {
    return; // the connection's own error: the caller closes it
  } catch (const std::exception& e) {
    fuzz::broken(std::string("decode_control threw other than bad_control_message: ") + e.what());
  }
  if (kind != static_cast<std::uint32_t>(control_kind_of<Message>::value))
    fuzz::broken("decode_control accepted a frame of another kind");
  round_trip(decoded);
}

template <class Message>
std::uint32_t kind_of() {
  return static_cast<std::uint32_t>(control_kind_of<Message>::value);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input_reader in({data, size});
  const auto selector = in.byte();
  std::uint32_t kind = 0;
  if (selector >= 0xf0) {
    const std::uint32_t low = in.u16();
    kind = low | (std::uint32_t{in.u16()} << 16);
  }
  const auto payload = in.rest();
  const auto pick = [&](std::uint32_t own) { return selector >= 0xf0 ? kind : own; };
  switch (selector % 6) {
    case 0:
      decode<join_request>(pick(kind_of<join_request>()), payload);
      break;
    case 1:
      decode<join_reply>(pick(kind_of<join_reply>()), payload);
      break;
    case 2:
      decode<membership>(pick(kind_of<membership>()), payload);
      break;
    case 3:
      decode<heartbeat>(pick(kind_of<heartbeat>()), payload);
      break;
    case 4:
      decode<collective_abort>(pick(kind_of<collective_abort>()), payload);
      break;
    case 5:
      decode<collective_progress>(pick(kind_of<collective_progress>()), payload);
      break;
  }
  return 0;
}

std::vector<std::vector<std::uint8_t>> lockstep_fuzz_seeds() {
  // The selector byte, then the payload (the frame without its header).
  const auto seed = [](std::uint8_t selector, const fuzz::bytes& frame_with_header) {
    fuzz::bytes out{selector};
    out.insert(out.end(), frame_with_header.begin() + frame_header_size, frame_with_header.end());
    return out;
  };
  return {
    seed(0, fuzz::frame_bytes(fuzz::sample_join_request())),
    seed(1, fuzz::frame_bytes(fuzz::sample_join_reply(true))),
    seed(1, fuzz::frame_bytes(fuzz::sample_join_reply(false))),
    seed(2, fuzz::frame_bytes(fuzz::sample_membership())),
    seed(3, fuzz::frame_bytes(fuzz::sample_heartbeat(7))),
    seed(4, fuzz::frame_bytes(fuzz::sample_abort())),
    seed(5, fuzz::frame_bytes(fuzz::sample_progress())),
  };
}

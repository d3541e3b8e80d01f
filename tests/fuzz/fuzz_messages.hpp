#pragma once

// Valid control messages and their frames, for the targets' seeds and for
// the harnesses that play a well-behaved peer: one of each message type
// that crosses a control connection, with every field set.

#include "fuzz_support.hpp"

#include "node/control_messages.hpp"
#include "runtime/little_endian.hpp"
#include "transport/tcp/frame.hpp"

#include <boost/asio/io_context.hpp>

namespace lockstep::fuzz {

/// `message` as the bytes of its frame on the wire (header and payload),
/// written by send_control itself.
template <class Message>
bytes frame_bytes(const Message& message) {
  boost::asio::io_context context;
  auto [near, far] = connected_pair(context);
  detail::send_control(near, message, hang_deadline());
  near.close();
  bytes out;
  std::uint8_t chunk[4096];
  for (;;) {
    const auto n = ::recv(far.native_handle(), chunk, sizeof chunk, 0);
    if (n <= 0)
      break;
    out.insert(out.end(), chunk, chunk + n);
  }
  return out;
}

/// A frame of `kind` with `payload`, built by hand.
inline bytes raw_frame(std::uint32_t kind, std::span<const std::uint8_t> payload) {
  bytes out;
  detail::append_le(out, kind);
  detail::append_le(out, std::uint64_t{payload.size()});
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

inline detail::join_request sample_join_request() {
  detail::join_request request;
  request.job_id = job_id;
  request.rank = 1;
  request.world_size = 3;
  request.generation = generation;
  request.local_replicas = 2;
  request.host = "10.0.0.2";
  request.port = 41234;
  request.host_hash = 0x1234567890abcdefULL;
  request.settings = {{"lockstep.version", "0.1.0"}, {"learning_rate", "0.01"}};
  request.proof.assign(32, 0x5a);
  return request;
}

inline detail::join_reply sample_join_reply(bool accepted) {
  detail::join_reply reply;
  reply.accepted = accepted;
  reply.generation = generation;
  if (!accepted)
    reply.refusal = {detail::error_kind::value_error, "rank 1 joined twice",
                     "lockstep::value_error"};
  return reply;
}

inline detail::membership sample_membership() {
  detail::membership m;
  m.job_id = job_id;
  m.generation = generation;
  for (std::uint32_t rank = 0; rank < 3; ++rank)
    m.members.push_back({rank, "10.0.0." + std::to_string(rank + 1),
                         static_cast<std::uint16_t>(40000 + rank), 2, 0x42 + rank});
  return m;
}

inline detail::heartbeat sample_heartbeat(std::uint64_t sequence) {
  return {1, generation, sequence, 123456789};
}

inline detail::collective_abort sample_abort() {
  return {2, generation, 17,
          {detail::error_kind::timeout_error, "collective 17 timed out", "lockstep::timeout_error"}};
}

inline detail::collective_progress sample_progress() {
  return {1, generation, 17, {17, 16, detail::collective_progress::no_answer}};
}

} // namespace lockstep::fuzz

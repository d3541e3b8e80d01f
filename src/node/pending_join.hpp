#pragma once

// One connection at the coordinator's rendezvous, from its accept to its
// join_request: the server's side of the handshake (handshake.hpp) and the
// request's frame (frame.hpp), moved by non-blocking reads and writes
// whenever poll(2) says the socket is ready. The rendezvous serves every
// pending connection at once in one thread, so a stranger that sends
// nothing, or garbage, holds only its own pending_join until its deadline,
// never the workers behind it.

#include "transport/tcp/handshake.hpp"
#include "transport/tcp/socket_io.hpp"

#include "node/wire_messages.hpp"

#include <poll.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace lockstep::detail {

/// The most a join_request's frame may carry: its settings (agreed_settings
/// limits) fit many times over; a larger length prefix drops the
/// connection before anything is allocated.
inline constexpr std::size_t max_join_payload = 256 * 1024;

class pending_join {
public:
  /// Takes `socket`, just accepted from `from` ("10.0.0.2:41234"); the
  /// handshake and the request must arrive by `deadline`.
  pending_join(tcp_socket socket, std::string from, std::span<const std::uint8_t> token,
               const handshake_identity& self, io_clock::time_point deadline);

  /// Where the connection comes from, for messages.
  const std::string& from() const noexcept { return from_; }
  io_clock::time_point deadline() const noexcept { return deadline_; }

  /// What to poll for: the socket, with POLLOUT while a reply is unsent,
  /// else POLLIN.
  pollfd poll_entry() const noexcept;

  /// Moves what the socket has ready without blocking; the join_request
  /// once it has arrived whole (the handshake passed). Throws
  /// handshake_refused (no lockstep hello, another job or generation, a
  /// proof that does not verify, a client that hangs up on our proof),
  /// connection_closed, frame_too_large or bad_control_message.
  std::optional<join_request> advance();

  /// The rank the peer proved in the handshake, once advance() returned its
  /// request.
  std::uint32_t rank() const noexcept { return handshake_.peer().rank; }

  tcp_socket& socket() noexcept { return socket_; }

private:
  enum class stage { hello_head, job_id, response, frame_header, frame_payload, done };

  /// The next `size` bytes belong to `next`.
  void expect(stage next, std::size_t size);
  /// The bytes of the current stage are all in: act on them.
  void on_input();
  /// advance(), but for what a closed connection means.
  std::optional<join_request> move_bytes();

  tcp_socket socket_;
  std::string from_;
  server_handshake handshake_;
  io_clock::time_point deadline_;
  stage stage_ = stage::hello_head;
  bytes hello_head_;
  bytes input_; // the current stage's bytes
  std::size_t received_ = 0;
  bytes output_; // a reply, written before anything more is read
  std::size_t sent_ = 0;
  std::uint32_t frame_kind_ = 0;
  std::optional<join_request> request_;
};

} // namespace lockstep::detail

#include "node/pending_join.hpp"

#include "node/control_messages.hpp"
#include "transport/tcp/frame.hpp"
#include "runtime/little_endian.hpp"

#include <boost/asio/buffer.hpp>

namespace lockstep::detail {

pending_join::pending_join(tcp_socket socket, std::string from,
                           std::span<const std::uint8_t> token, const handshake_identity& self,
                           io_clock::time_point deadline)
  : socket_(std::move(socket)), from_(std::move(from)), handshake_(token, self),
    deadline_(deadline) {
  socket_.non_blocking(true);
  expect(stage::hello_head, hello_head_size);
}

pollfd pending_join::poll_entry() const noexcept {
  const short events = sent_ < output_.size() ? POLLOUT : POLLIN;
  return {const_cast<tcp_socket&>(socket_).native_handle(), events, 0};
}

void pending_join::expect(stage next, std::size_t size) {
  stage_ = next;
  input_.assign(size, 0);
  received_ = 0;
}

void pending_join::on_input() {
  switch (stage_) {
    case stage::hello_head:
      hello_head_ = input_;
      expect(stage::job_id, handshake_.job_id_length(hello_head_));
      return;
    case stage::job_id:
      output_ = handshake_.challenge(hello_head_, input_);
      sent_ = 0;
      expect(stage::response, response_size);
      return;
    case stage::response:
      output_ = handshake_.accept(input_);
      sent_ = 0;
      expect(stage::frame_header, frame_header_size);
      return;
    case stage::frame_header: {
      frame_kind_ = load_le<std::uint32_t>(input_);
      const auto length = load_le<std::uint64_t>(input_, 4);
      if (length > max_join_payload)
        throw frame_too_large("a join frame of " + std::to_string(length)
                              + " bytes exceeds the limit of " + std::to_string(max_join_payload));
      expect(stage::frame_payload, length);
      return;
    }
    case stage::frame_payload:
      request_ = decode_control<join_request>(frame{frame_kind_, std::move(input_)});
      stage_ = stage::done;
      return;
    case stage::done:
      return;
  }
}

std::optional<join_request> pending_join::advance() {
  try {
    return move_bytes();
  } catch (const connection_closed&) {
    // A client checks our proof before it sends its own: one that hangs up
    // right after the challenge holds another token (or died just then).
    if (stage_ == stage::response && received_ == 0)
      throw handshake_refused("it hung up after the challenge: it did not accept this cluster's "
                              "proof of the token (another cluster token)");
    throw;
  }
}

std::optional<join_request> pending_join::move_bytes() {
  for (;;) {
    boost::system::error_code error;
    if (sent_ < output_.size()) {
      const auto written = moved_or_closed(
        socket_.write_some(boost::asio::buffer(output_.data() + sent_, output_.size() - sent_),
                           error),
        error, from_);
      if (written == 0)
        return std::nullopt;
      sent_ += written;
      continue;
    }
    if (stage_ == stage::done)
      return std::move(request_);
    if (received_ == input_.size()) {
      on_input();
      continue;
    }
    const auto got = moved_or_closed(
      socket_.read_some(boost::asio::buffer(input_.data() + received_, input_.size() - received_),
                        error),
      error, from_);
    if (got == 0)
      return std::nullopt;
    received_ += got;
  }
}

} // namespace lockstep::detail

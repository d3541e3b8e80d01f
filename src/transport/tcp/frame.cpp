#include "transport/tcp/frame.hpp"

#include <array>
#include <string>

namespace lockstep::detail {

void write_frame(tcp_socket& socket, std::uint32_t kind, std::span<const std::uint8_t> payload,
                 io_clock::time_point deadline) {
  std::array<std::uint8_t, frame_header_size> header{};
  const std::uint64_t length = payload.size();
  for (std::size_t i = 0; i < 4; ++i)
    header[i] = static_cast<std::uint8_t>(kind >> (8 * i));
  for (std::size_t i = 0; i < 8; ++i)
    header[4 + i] = static_cast<std::uint8_t>(length >> (8 * i));
  write_all(socket, {header, payload}, deadline);
}

frame read_frame(tcp_socket& socket, std::size_t max_payload, io_clock::time_point deadline) {
  std::array<std::uint8_t, frame_header_size> header{};
  read_exact(socket, header, deadline);
  frame result;
  std::uint64_t length = 0;
  for (std::size_t i = 0; i < 4; ++i)
    result.kind |= static_cast<std::uint32_t>(header[i]) << (8 * i);
  for (std::size_t i = 0; i < 8; ++i)
    length |= static_cast<std::uint64_t>(header[4 + i]) << (8 * i);
  if (length > max_payload)
    throw frame_too_large("a frame of " + std::to_string(length) + " bytes exceeds the limit of "
                          + std::to_string(max_payload));
  result.payload.resize(length);
  read_exact(socket, result.payload, deadline);
  return result;
}

} // namespace lockstep::detail

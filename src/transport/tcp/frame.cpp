#include "transport/tcp/frame.hpp"

#include "runtime/little_endian.hpp"

#include <array>
#include <string>

namespace lockstep::detail {

void write_frame(tcp_socket& socket, std::uint32_t kind, std::span<const std::uint8_t> payload,
                 io_clock::time_point deadline) {
  std::array<std::uint8_t, frame_header_size> header{};
  store_le(header.data(), kind);
  store_le(header.data() + 4, std::uint64_t{payload.size()});
  write_all(socket, {header, payload}, deadline);
}

frame read_frame(tcp_socket& socket, std::size_t max_payload, io_clock::time_point deadline) {
  std::array<std::uint8_t, frame_header_size> header{};
  read_exact(socket, header, deadline);
  frame result;
  result.kind = load_le<std::uint32_t>(header);
  const auto length = load_le<std::uint64_t>(header, 4);
  if (length > max_payload)
    throw frame_too_large("a frame of " + std::to_string(length) + " bytes exceeds the limit of "
                          + std::to_string(max_payload));
  result.payload.resize(length);
  read_exact(socket, result.payload, deadline);
  return result;
}

} // namespace lockstep::detail

#pragma once

// Frames on an authenticated connection: a 12-byte header (a 4-byte kind
// and an 8-byte payload length, little-endian) and the payload, written in
// one gather write. A reader caps the length it accepts before it
// allocates, so a hostile or corrupt length prefix (2^40) costs nothing
// but the connection.

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "transport/tcp/socket_io.hpp"

namespace lockstep::detail {

inline constexpr std::size_t frame_header_size = 12;

/// A frame's length prefix exceeded the reader's cap.
class frame_too_large : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct frame {
  std::uint32_t kind = 0;
  std::vector<std::uint8_t> payload;
};

/// Writes one frame. Throws as write_all.
void write_frame(tcp_socket& socket, std::uint32_t kind, std::span<const std::uint8_t> payload,
                 io_clock::time_point deadline);

/// Reads one frame of at most `max_payload` bytes. Throws frame_too_large
/// (before allocating) for a longer one, else as read_exact.
frame read_frame(tcp_socket& socket, std::size_t max_payload, io_clock::time_point deadline);

} // namespace lockstep::detail

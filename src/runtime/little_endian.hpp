#pragma once

// Integers on lockstep's own wire (handshakes, frame headers, ring
// records): little-endian, whatever the host's order.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lockstep::detail {

/// Writes `value` at `out` (sizeof(T) bytes).
template <class T>
void store_le(std::uint8_t* out, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(value) >> (8 * i));
}

/// Appends `value` to `out`.
template <class T>
void append_le(std::vector<std::uint8_t>& out, T value) {
  out.resize(out.size() + sizeof(T));
  store_le(out.data() + out.size() - sizeof(T), value);
}

/// The T at `in[at]` (the caller checked that sizeof(T) bytes are there).
template <class T>
T load_le(std::span<const std::uint8_t> in, std::size_t at = 0) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<std::uint64_t>(in[at + i]) << (8 * i);
  return static_cast<T>(value);
}

} // namespace lockstep::detail

#pragma once

// A host tensor's data as bytes, and a run of tensors as one pack of
// bytes (one after another), for the communicators that move them between
// processes (the TCP ring, the shared-memory group, MPI).

#include "lockstep/tensor.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace lockstep::detail {

inline std::span<std::uint8_t> bytes_of(tensor& t) {
  return {static_cast<std::uint8_t*>(t.raw_data()), t.byte_size()};
}

inline std::span<const std::uint8_t> bytes_of(const tensor& t) {
  return {static_cast<const std::uint8_t*>(t.raw_data()), t.byte_size()};
}

/// Copies bytes [offset, offset + length) of the concatenation of
/// `tensors` to `to`.
inline void read_pack(std::span<const tensor> tensors, std::size_t offset, std::byte* to,
                      std::size_t length) {
  for (const auto& t : tensors) {
    const auto data = bytes_of(t);
    if (offset >= data.size()) {
      offset -= data.size();
      continue;
    }
    const auto n = std::min(length, data.size() - offset);
    std::memcpy(to, data.data() + offset, n);
    to += n;
    length -= n;
    offset = 0;
    if (length == 0)
      return;
  }
}

/// Copies `length` bytes from `from` to bytes [offset, offset + length) of
/// the concatenation of `tensors`.
inline void write_pack(std::span<tensor> tensors, std::size_t offset, const std::byte* from,
                       std::size_t length) {
  for (auto& t : tensors) {
    const auto data = bytes_of(t);
    if (offset >= data.size()) {
      offset -= data.size();
      continue;
    }
    const auto n = std::min(length, data.size() - offset);
    std::memcpy(data.data() + offset, from, n);
    from += n;
    length -= n;
    offset = 0;
    if (length == 0)
      return;
  }
}

/// The bytes of the pack of `tensors`.
inline std::size_t pack_bytes(std::span<const tensor> tensors) {
  std::size_t total = 0;
  for (const auto& t : tensors)
    total += t.byte_size();
  return total;
}

} // namespace lockstep::detail

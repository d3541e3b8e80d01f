#pragma once

// A host tensor's data as bytes, for the communicators that move them
// between processes (the TCP ring, the shared-memory group).

#include "lockstep/tensor.hpp"

#include <cstdint>
#include <span>

namespace lockstep::detail {

inline std::span<std::uint8_t> bytes_of(tensor& t) {
  return {static_cast<std::uint8_t*>(t.raw_data()), t.byte_size()};
}

inline std::span<const std::uint8_t> bytes_of(const tensor& t) {
  return {static_cast<const std::uint8_t*>(t.raw_data()), t.byte_size()};
}

} // namespace lockstep::detail

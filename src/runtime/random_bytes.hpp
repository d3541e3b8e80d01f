#pragma once

// Bytes from the system's cryptographic generator (OpenSSL's RAND_bytes):
// the handshake's nonces and generated cluster tokens.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lockstep::detail {

/// `count` random bytes. Throws std::runtime_error when the generator fails.
std::vector<std::uint8_t> random_bytes(std::size_t count);

} // namespace lockstep::detail

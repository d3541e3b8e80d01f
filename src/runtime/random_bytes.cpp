#include "runtime/random_bytes.hpp"

#include <openssl/rand.h>

#include <stdexcept>

namespace lockstep::detail {

std::vector<std::uint8_t> random_bytes(std::size_t count) {
  std::vector<std::uint8_t> out(count);
  if (RAND_bytes(out.data(), static_cast<int>(count)) != 1)
    throw std::runtime_error("OpenSSL's random generator failed");
  return out;
}

} // namespace lockstep::detail

#pragma once

// A 64-bit hash of values and strings: collective fingerprints
// (collectives/collective_fingerprint.hpp) and the job ids derived from a
// launcher's variables (cluster_resolver/) condense their inputs with it.

#include <cstdint>
#include <string_view>

namespace lockstep::detail {

/// A 64-bit hash of values and strings for fingerprints: each value is
/// mixed in with splitmix64's finaliser, so every input bit reaches every
/// hash bit.
struct fingerprint_hash {
  std::uint64_t hash = 14695981039346656037ull;
  void operator()(std::uint64_t value) noexcept {
    auto z = hash ^ (value + 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    hash = z ^ (z >> 31);
  }
  void operator()(std::string_view text) noexcept {
    for (unsigned char c : text)
      (*this)(c);
    (*this)(text.size());
  }
};

} // namespace lockstep::detail

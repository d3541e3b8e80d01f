#pragma once

// What the peer programs (mpi_allreduce, gloo_allreduce, socket_floor) share: the
// --sizes list and the known values whose sum each checks exactly. Header
// only: each program is built alone by its script, with its own compiler.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace peers {

/// "B,B,..." as byte counts: each a positive multiple of 4 of at most
/// `max_bytes`; otherwise `fail` (which does not return) gets the problem.
template <class Fail>
std::vector<std::size_t> parse_sizes(const std::string& text, std::size_t max_bytes, Fail fail) {
  std::vector<std::size_t> sizes;
  for (std::size_t begin = 0; begin <= text.size();) {
    const auto end = std::min(text.find(',', begin), text.size());
    const auto item = text.substr(begin, end - begin);
    char* rest = nullptr;
    const auto value = std::strtoull(item.c_str(), &rest, 10);
    if (item.empty() || *rest != '\0' || value == 0 || value % sizeof(float) != 0
        || value > max_bytes)
      fail("--sizes: '" + item + "' is not a positive multiple of 4 bytes up to "
           + std::to_string(max_bytes));
    sizes.push_back(value);
    begin = end + 1;
  }
  return sizes;
}

/// Rank `rank`'s known values: element i is (rank + 1)(i % 7 + 1).
inline void fill_known(std::vector<float>& buffer, int rank) {
  for (std::size_t i = 0; i < buffer.size(); ++i)
    buffer[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

/// How many elements of a SUM of `ranks` ranks' known values are wrong:
/// each must be n(n+1)/2 · (i % 7 + 1), exactly.
inline std::size_t count_wrong(const std::vector<float>& buffer, int ranks) {
  const int triangle = ranks * (ranks + 1) / 2;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < buffer.size(); ++i)
    wrong += buffer[i] != static_cast<float>(triangle * static_cast<int>(i % 7 + 1));
  return wrong;
}

} // namespace peers

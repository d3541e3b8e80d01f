#pragma once

// One rank's share of the point-to-point all-gather and broadcast checks,
// over any link (the in-memory one, the TCP mesh): shared by
// collective_algorithms_test and tcp_mesh_test.

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/binomial_tree.hpp"
#include "collectives/recursive_doubling.hpp"

namespace lockstep::detail::test {

/// Recursive-doubling all-gather of `block`-byte blocks (byte i of rank
/// r's is 31r + i), then a binomial-tree broadcast of `broadcast_bytes`
/// from every root; FAILs naming this rank at the first wrong byte.
inline void check_gather_and_broadcast(link& group, std::size_t block,
                                       std::size_t broadcast_bytes) {
  using namespace std::chrono_literals;
  const auto rank = group.rank();
  const auto world = group.size();
  std::vector<std::uint8_t> blocks(world * block, 0);
  for (std::size_t i = 0; i < block; ++i)
    blocks[rank * block + i] = static_cast<std::uint8_t>(31 * rank + i);
  recursive_doubling_all_gather(group, blocks, group.now() + 30s);
  for (std::size_t r = 0; r < world; ++r)
    for (std::size_t i = 0; i < block; ++i)
      if (blocks[r * block + i] != static_cast<std::uint8_t>(31 * r + i)) {
        FAIL("rank " << rank << ": block " << r << " byte " << i << " of " << block << " is "
                     << int{blocks[r * block + i]});
        return;
      }
  for (std::size_t root = 0; root < world; ++root) {
    std::vector<std::uint8_t> data(broadcast_bytes, static_cast<std::uint8_t>(rank + 1));
    binomial_tree_broadcast(group, root, data, group.now() + 30s);
    if (data != std::vector<std::uint8_t>(broadcast_bytes, static_cast<std::uint8_t>(root + 1))) {
      FAIL("rank " << rank << " of " << world << " did not get root " << root << "'s "
                   << broadcast_bytes << " bytes");
      return;
    }
  }
}

} // namespace lockstep::detail::test

#include "collectives/binomial_tree.hpp"

#include "lockstep/error.hpp"

#include <bit>
#include <string>

namespace lockstep::detail {

void binomial_tree_broadcast(link& group, std::size_t root, std::span<std::uint8_t> data,
                             link::time_point deadline) {
  const auto world = group.size();
  if (root >= world)
    throw value_error("binomial_tree_broadcast: root " + std::to_string(root)
                      + " is not a rank of " + std::to_string(world));
  if (world == 1 || data.empty())
    return;
  const auto d = (group.rank() + world - root) % world; // the distance from the root
  const auto rank_at = [&](std::size_t distance) { return (distance + root) % world; };
  const auto high = std::bit_floor(d); // d's highest bit: the step it receives in (0: the root)
  if (d != 0)
    group.receive(rank_at(d - high), data, deadline);
  // Then it sends in every later step k, to d + k.
  for (std::size_t k = d == 0 ? 1 : 2 * high; k < world; k *= 2)
    if (d + k < world)
      group.send(rank_at(d + k), data, deadline);
}

} // namespace lockstep::detail

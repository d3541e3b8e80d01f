#pragma once

// Binomial-tree broadcast, written once against a link
// (transport/link.hpp) that reaches any rank: ceil(log2 world) steps
// instead of the ring's world - 1, for any world size
// (docs/algorithms.md). Ranks are counted from the root, d = (rank -
// root) mod world. In step k (k = 0, 1, ..) every rank with d < 2^k that
// holds the data sends it to d + 2^k, when that is a rank: rank d
// receives in the step of d's highest bit, from d minus that bit, then
// sends to d + 2^j for each later step j. The root sends ceil(log2 world)
// times, so its link carries ceil(log2 world) * S bytes for S bytes of
// data; every rank receives S once. Nothing is combined: every rank gets
// the root's bits. Deadlines are the link's; a closed link or a silent
// parent throws link_closed or link_deadline_passed naming it, and the
// caller closes its link so that its subtree fails at once.

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/link.hpp"

namespace lockstep::detail {

/// Every rank's `data` receives rank `root`'s, down a binomial tree.
/// Throws value_error for a root outside the group.
void binomial_tree_broadcast(link& group, std::size_t root, std::span<std::uint8_t> data,
                             link::time_point deadline);

} // namespace lockstep::detail

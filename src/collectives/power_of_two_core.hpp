#pragma once

// power_of_two_core: how the point-to-point algorithms (recursive
// doubling, recursive halving-doubling) run on any number of ranks: the
// usual fold of the ranks beyond the largest power of two into a core of
// that size (MPICH's, Thakur, Rabenseifner and Gropp 2005). With
// world = core + extra (extra < core), ranks 0 .. 2*extra - 1 pair up:
// each even rank r hands its part to r + 1 first and takes the result
// back from it at the end, and sits out the core. The core's ranks are
// numbered 0 .. core - 1 in rank order ("virtual ranks"): odd rank
// r < 2*extra is virtual rank r / 2, rank r >= 2*extra is r - extra.
// Virtual rank v stands for the ranks first(v) .. last(v), one or two
// ranks in a row, so a block of consecutive virtual ranks stands for a
// block of consecutive ranks.

#include <bit>
#include <cstddef>

namespace lockstep::detail {

struct power_of_two_core {
  std::size_t world; ///< ranks in all
  std::size_t core;  ///< the largest power of two <= world
  std::size_t extra; ///< world - core: the ranks folded in

  explicit power_of_two_core(std::size_t world_size)
    : world(world_size), core(std::bit_floor(world_size)), extra(world_size - core) {}

  /// Whether rank r hands its part to r + 1 and sits out the core.
  bool folded_out(std::size_t r) const { return r < 2 * extra && r % 2 == 0; }
  /// Whether rank r takes rank r - 1's part first.
  bool folds_in(std::size_t r) const { return r < 2 * extra && r % 2 == 1; }

  /// The virtual rank of a rank in the core (not folded_out).
  std::size_t virtual_rank(std::size_t r) const { return r < 2 * extra ? r / 2 : r - extra; }
  /// The rank that is virtual rank v in the core.
  std::size_t rank_of(std::size_t v) const { return v < extra ? 2 * v + 1 : v + extra; }
  /// The first rank that virtual rank v stands for.
  std::size_t first(std::size_t v) const { return v < extra ? 2 * v : v + extra; }
  /// One past the last rank that virtual rank v stands for.
  std::size_t end(std::size_t v) const { return rank_of(v) + 1; }

  /// log2(core): the core's steps.
  std::size_t steps() const { return static_cast<std::size_t>(std::countr_zero(core)); }
};

} // namespace lockstep::detail

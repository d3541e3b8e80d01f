#pragma once

// core_pacing: how the log-step algorithms keep a rank ahead from
// flooding a rank behind (docs/algorithms.md, "The fold, paced"). Off a
// power of two the core's ranks that take a folded rank's buffer
// (power_of_two_core::folds_in) start the core one buffer late, and so
// does every rank once it has combined with one of them. A rank ahead
// sends its step's message at once, and it arrives while the rank behind
// still receives the message before it: the two share that rank's
// incoming link, which delays the rank behind and, step by step, every
// rank after it (on a simulated star of 33 hosts, 1.5-2x the α-β cost).
// So in a step where exactly one side is behind, and the call moves at
// least link::paced_from() bytes, the rank behind sends one word first,
// when its incoming link is free, and the rank ahead waits for it before
// it sends: one α more in that step instead of a shared link. Below that
// size an α costs more than the overlap saves, and nothing is paced.
//
// "Behind" is static: virtual rank w is behind in a step when the ranks
// it has combined with so far include one that folded a rank in (virtual
// rank < extra). Recursive doubling's step of mask m (m = 1, 2, ..): w has
// combined with its aligned block of m virtual ranks, so it is behind
// when (w & ~(m - 1)) < extra. Halving-doubling's reduce-scatter step of
// mask m (m = core / 2, .., 1): with the virtual ranks equal to it modulo
// 2m, so when (w & (2m - 1)) < extra; its all-gather comes after every
// rank combined with every other, and is not paced.

#include <cstddef>

#include "collectives/power_of_two_core.hpp"
#include "transport/link.hpp"

namespace lockstep::detail {

/// Whether virtual rank w is behind in recursive doubling's step of mask m.
inline bool doubling_behind(const power_of_two_core& core, std::size_t w, std::size_t m) {
  return (w & ~(m - 1)) < core.extra;
}

/// Whether virtual rank w is behind in halving-doubling's reduce-scatter
/// step of mask m.
inline bool halving_behind(const power_of_two_core& core, std::size_t w, std::size_t m) {
  return (w & (2 * m - 1)) < core.extra;
}

/// The steps of recursive doubling in which some pair has one side behind
/// (those that pace): the masks m for which some multiple b of 2m has
/// b < extra <= b + m.
std::size_t doubling_paced_steps(const power_of_two_core& core);

/// The reduce-scatter steps of halving-doubling that pace: extra < 2m.
std::size_t halving_paced_steps(const power_of_two_core& core);

/// The segments (of core) that halving-doubling's pacing steps send: m
/// in the step of mask m.
std::size_t halving_paced_segments(const power_of_two_core& core);

/// Before a step's exchange with `peer`: when exactly one side is behind
/// and `bytes` (the call's) reach group.paced_from(), the side behind
/// sends the word and the side ahead waits for it (link errors as the
/// exchange's; a byte that is not the word is link_closed, the peer's
/// stream out of step).
void pace_step(link& group, std::size_t peer, bool me_behind, bool peer_behind,
               std::size_t bytes, link::time_point deadline);

} // namespace lockstep::detail

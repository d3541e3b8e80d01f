#include "collectives/core_pacing.hpp"

#include <cstdint>
#include <string>

namespace lockstep::detail {

namespace {

/// The word a rank behind sends: a fixed value, so that a stream out of
/// step (ranks that disagree on pacing) shows instead of being read as data.
constexpr std::uint8_t ready_word = 0xa5;

} // namespace

std::size_t doubling_paced_steps(const power_of_two_core& core) {
  std::size_t steps = 0;
  for (std::size_t m = 1; m < core.core; m *= 2)
    steps += core.extra > 0 && (core.extra - 1) % (2 * m) < m ? 1 : 0;
  return steps;
}

std::size_t halving_paced_steps(const power_of_two_core& core) {
  std::size_t steps = 0;
  for (std::size_t m = 1; m < core.core; m *= 2)
    steps += core.extra > 0 && core.extra < 2 * m ? 1 : 0;
  return steps;
}

std::size_t halving_paced_segments(const power_of_two_core& core) {
  std::size_t segments = 0;
  for (std::size_t m = 1; m < core.core; m *= 2)
    segments += core.extra > 0 && core.extra < 2 * m ? m : 0;
  return segments;
}

void pace_step(link& group, std::size_t peer, bool me_behind, bool peer_behind,
               std::size_t bytes, link::time_point deadline) {
  if (me_behind == peer_behind || bytes < group.paced_from())
    return;
  std::uint8_t word = ready_word;
  if (me_behind) {
    group.send(peer, {&word, 1}, deadline);
    return;
  }
  group.receive(peer, {&word, 1}, deadline);
  if (word != ready_word)
    throw link_closed("rank " + std::to_string(peer) + " sent byte "
                      + std::to_string(word) + " where its pacing word belongs: the ranks "
                      + "disagree on pacing (link::paced_from)");
}

} // namespace lockstep::detail

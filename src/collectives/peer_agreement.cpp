#include "collectives/peer_agreement.hpp"

#include "collectives/power_of_two_core.hpp"
#include "runtime/fault_injection.hpp"

#include <algorithm>

namespace lockstep::detail {

namespace {

/// Swaps the frames of ranks [mine_begin, mine_end) for those of ranks
/// [theirs_begin, theirs_end) with rank `peer`, pairing them in order:
/// each side receives as many frames as the other sends.
void swap_frames(link& group, ring_records& records, std::size_t peer, std::size_t mine_begin,
                 std::size_t mine_end, std::size_t theirs_begin, std::size_t theirs_end,
                 link::time_point deadline) {
  const auto mine = mine_end - mine_begin;
  const auto theirs = theirs_end - theirs_begin;
  for (std::size_t i = 0; i < std::max(mine, theirs); ++i) {
    if (i < theirs)
      group.exchange_frame(i < mine ? peer : link::no_rank,
                           i < mine ? records.frame(mine_begin + i)
                                    : std::span<const std::uint8_t>{},
                           peer, records.buffer(theirs_begin + i), ring_records::max_frame_bytes,
                           deadline);
    else
      group.send(peer, records.frame(mine_begin + i), deadline);
  }
}

} // namespace

void peer_agree(link& group, ring_records& records, const collective_fingerprint& mine,
                const std::exception_ptr& failure, link::time_point deadline) {
  fault_point("agree");
  const auto world = group.size();
  const auto rank = group.rank();
  records.start(rank, world, mine, failure, {});
  const power_of_two_core layout(world);
  if (layout.folded_out(rank)) {
    group.send(rank + 1, records.frame(rank), deadline);
    // Every other rank's frame comes back from rank + 1, in rank order.
    for (std::size_t r = 0; r < world; ++r)
      if (r != rank)
        group.exchange_frame(link::no_rank, {}, rank + 1, records.buffer(r),
                             ring_records::max_frame_bytes, deadline);
  } else {
    if (layout.folds_in(rank))
      group.exchange_frame(link::no_rank, {}, rank - 1, records.buffer(rank - 1),
                           ring_records::max_frame_bytes, deadline);
    const auto v = layout.virtual_rank(rank);
    for (std::size_t m = 1; m < layout.core; m *= 2) {
      const auto mine_first = v & ~(m - 1);
      const auto theirs_first = (v ^ m) & ~(m - 1);
      swap_frames(group, records, layout.rank_of(v ^ m), layout.first(mine_first),
                  layout.end(mine_first + m - 1), layout.first(theirs_first),
                  layout.end(theirs_first + m - 1), deadline);
    }
    if (layout.folds_in(rank))
      for (std::size_t r = 0; r < world; ++r)
        if (r != rank - 1)
          group.send(rank - 1, records.frame(r), deadline);
  }
  records.check();
}

} // namespace lockstep::detail

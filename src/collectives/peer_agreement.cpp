#include "collectives/peer_agreement.hpp"

#include "collectives/byte_reduction.hpp"
#include "collectives/power_of_two_core.hpp"
#include "collectives/ring_collectives.hpp"
#include "runtime/fault_injection.hpp"
#include "runtime/little_endian.hpp"

#include <algorithm>
#include <string>

namespace lockstep::detail {

namespace {

/// Swaps the frames of ranks [mine_begin, mine_end) for those of ranks
/// [theirs_begin, theirs_end) with rank `peer` in one exchange: the frames
/// travel in one outer frame (their concatenation), so a step costs one
/// message whatever the number of frames, as the model counts it.
void swap_frames(link& group, ring_records& records, std::size_t peer, std::size_t mine_begin,
                 std::size_t mine_end, std::size_t theirs_begin, std::size_t theirs_end,
                 link::time_point deadline) {
  thread_local bytes outgoing;
  thread_local bytes incoming;
  std::size_t inner = 0;
  for (auto r = mine_begin; r < mine_end; ++r)
    inner += records.frame(r).size();
  outgoing.resize(8 + inner);
  store_le<std::uint64_t>(outgoing.data(), inner);
  auto* at = outgoing.data() + 8;
  for (auto r = mine_begin; r < mine_end; ++r) {
    const auto frame = records.frame(r);
    std::copy(frame.begin(), frame.end(), at);
    at += frame.size();
  }
  const auto count = theirs_end - theirs_begin;
  group.exchange_frame(peer, outgoing, peer, incoming, count * ring_records::max_frame_bytes,
                       deadline);
  // The peer's frames, in rank order; a malformed one is a link failure.
  std::size_t offset = 8;
  for (auto r = theirs_begin; r < theirs_end; ++r) {
    if (incoming.size() - offset < 8
        || incoming.size() - offset - 8 < load_le<std::uint64_t>(incoming, offset))
      throw link_closed("worker at rank " + std::to_string(peer)
                        + " sent a malformed agreement frame");
    const auto size = 8 + load_le<std::uint64_t>(incoming, offset);
    auto& frame = records.buffer(r);
    frame.assign(incoming.begin() + static_cast<std::ptrdiff_t>(offset),
                 incoming.begin() + static_cast<std::ptrdiff_t>(offset + size));
    offset += size;
  }
  if (offset != incoming.size())
    throw link_closed("worker at rank " + std::to_string(peer)
                      + " sent a malformed agreement frame");
}

} // namespace

void peer_agree(link& group, ring_records& records, const collective_fingerprint& mine,
                const std::exception_ptr& failure, link::time_point deadline) {
  peer_agree(group, records, mine, failure, {}, deadline);
}

void peer_agree(link& group, ring_records& records, const collective_fingerprint& mine,
                const std::exception_ptr& failure, std::span<const std::uint8_t> payload,
                link::time_point deadline) {
  fault_point("agree");
  const auto world = group.size();
  const auto rank = group.rank();
  records.start(rank, world, mine, failure, payload);
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

void peer_agreed_all_reduce(link& group, ring_records& records,
                            const collective_fingerprint& mine, const std::exception_ptr& failure,
                            reduce_op op, dtype type, std::span<std::uint8_t> data,
                            link::time_point deadline,
                            const std::function<void(reduce_op, dtype, std::span<std::uint8_t>)>&
                              reduce) {
  reduce_as_ring_does("all_reduce", op, type, data, group.size(),
                      [&](reduce_op combining, dtype element, std::span<std::uint8_t> bytes) {
                        const auto world = group.size();
                        if (world > 1 && all_reduce_gathers(world, bytes.size(), element)) {
                          peer_agree(group, records, mine, failure, bytes, deadline);
                          reduce_gathered(records, group.rank(), world, combining, element,
                                          bytes);
                          return;
                        }
                        peer_agree(group, records, mine, failure, deadline);
                        reduce(combining, element, bytes);
                      });
}

} // namespace lockstep::detail

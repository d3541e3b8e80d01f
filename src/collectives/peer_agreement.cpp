#include "collectives/peer_agreement.hpp"

#include "collectives/power_of_two_core.hpp"
#include "runtime/fault_injection.hpp"
#include "runtime/little_endian.hpp"

#include <algorithm>
#include <string>

namespace lockstep::detail {

namespace {

/// The frames of ranks [begin, end), in rank order, as one outer frame
/// (their concatenation behind its length): one message whatever their
/// number, as the model counts a step.
const bytes& pack_frames(const ring_records& records, std::size_t begin, std::size_t end) {
  thread_local bytes outgoing;
  std::size_t inner = 0;
  for (auto r = begin; r < end; ++r)
    inner += records.frame(r).size();
  outgoing.resize(8 + inner);
  store_le<std::uint64_t>(outgoing.data(), inner);
  auto* at = outgoing.data() + 8;
  for (auto r = begin; r < end; ++r) {
    const auto frame = records.frame(r);
    std::copy(frame.begin(), frame.end(), at);
    at += frame.size();
  }
  return outgoing;
}

/// Splits `outer`, which rank `peer` packed, into the frames of ranks
/// [begin, end); a malformed one is a link failure.
void unpack_frames(const bytes& outer, ring_records& records, std::size_t begin, std::size_t end,
                   std::size_t peer) {
  const auto malformed = [&] {
    return link_closed("worker at rank " + std::to_string(peer)
                       + " sent a malformed agreement frame");
  };
  std::size_t offset = 8;
  for (auto r = begin; r < end; ++r) {
    if (outer.size() - offset < 8
        || outer.size() - offset - 8 < load_le<std::uint64_t>(outer, offset))
      throw malformed();
    const auto size = 8 + load_le<std::uint64_t>(outer, offset);
    records.buffer(r).assign(outer.begin() + static_cast<std::ptrdiff_t>(offset),
                             outer.begin() + static_cast<std::ptrdiff_t>(offset + size));
    offset += size;
  }
  if (offset != outer.size())
    throw malformed();
}

/// Swaps the frames of ranks [mine_begin, mine_end) for those of ranks
/// [theirs_begin, theirs_end) with rank `peer`, in one exchange.
void swap_frames(link& group, ring_records& records, std::size_t peer, std::size_t mine_begin,
                 std::size_t mine_end, std::size_t theirs_begin, std::size_t theirs_end,
                 link::time_point deadline) {
  thread_local bytes incoming;
  group.exchange_frame(peer, pack_frames(records, mine_begin, mine_end), peer, incoming,
                       (theirs_end - theirs_begin) * ring_records::max_frame_bytes, deadline);
  unpack_frames(incoming, records, theirs_begin, theirs_end, peer);
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
    // Every rank's frame (its own too) comes back from rank + 1 at once.
    thread_local bytes incoming;
    group.exchange_frame(link::no_rank, {}, rank + 1, incoming,
                         world * ring_records::max_frame_bytes, deadline);
    unpack_frames(incoming, records, 0, world, rank + 1);
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
      group.send(rank - 1, pack_frames(records, 0, world), deadline);
  }
  records.check();
}

} // namespace lockstep::detail

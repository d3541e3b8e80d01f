#include "collectives/halving_doubling.hpp"

#include "collectives/byte_reduction.hpp"
#include "collectives/core_pacing.hpp"
#include "collectives/peer_agreement.hpp"
#include "collectives/power_of_two_core.hpp"
#include "collectives/thread_scratch.hpp"
#include "runtime/fault_injection.hpp"

namespace lockstep::detail {

namespace {

/// The all-reduce of a non-half type, MEAN already a SUM.
void reduce(link& group, reduce_op op, dtype type, std::span<std::uint8_t> data,
            link::time_point deadline) {
  const auto rank = group.rank();
  const power_of_two_core layout(group.size());
  if (layout.world == 1 || data.empty())
    return;
  const auto element = size_of(type);
  const auto elements = data.size() / element;
  // Segments first .. first + count - 1.
  const auto segments = [&](std::size_t first, std::size_t count) {
    const auto begin = first * elements / layout.core * element;
    const auto end = (first + count) * elements / layout.core * element;
    return data.subspan(begin, end - begin);
  };
  // The fold receives a whole buffer, the first halving step half of one.
  const auto scratch_bytes = layout.extra > 0 ? data.size() : segments(0, layout.core / 2).size()
                                                                  + element;
  auto* scratch = reinterpret_cast<std::uint8_t*>(thread_scratch(scratch_bytes));
  if (layout.folded_out(rank)) {
    group.send(rank + 1, data, deadline);
    group.receive(rank + 1, data, deadline);
    return;
  }
  if (layout.folds_in(rank)) {
    const std::span in(scratch, data.size());
    group.receive(rank - 1, in, deadline);
    combine_ordered(op, type, data, in, false); // x_{r-1} op x_r
  }
  const auto v = layout.virtual_rank(rank);
  for (std::size_t m = layout.core / 2; m >= 1; m /= 2) {
    const auto first = v & ~(2 * m - 1);
    const bool lower = (v & m) == 0;
    const auto kept = segments(lower ? first : first + m, m);
    const auto sent = segments(lower ? first + m : first, m);
    const auto peer = layout.rank_of(v ^ m);
    const std::span in(scratch, kept.size());
    pace_step(group, peer, halving_behind(layout, v, m), halving_behind(layout, v ^ m, m),
              data.size(), deadline);
    group.exchange(peer, sent, peer, in, deadline);
    combine_ordered(op, type, kept, in, lower);
    if (m == layout.core / 2)
      fault_point("reduce-scatter");
  }
  for (std::size_t m = 1; m < layout.core; m *= 2) {
    const auto peer = layout.rank_of(v ^ m);
    group.exchange(peer, segments(v & ~(m - 1), m), peer, segments((v ^ m) & ~(m - 1), m),
                   deadline);
    if (m == 1)
      fault_point("all-gather");
  }
  if (layout.folds_in(rank))
    group.send(rank - 1, data, deadline);
}

} // namespace

void halving_doubling_all_reduce(link& group, ring_records& records,
                                 const collective_fingerprint& mine,
                                 const std::exception_ptr& failure, reduce_op op, dtype type,
                                 std::span<std::uint8_t> data, link::time_point deadline) {
  peer_agree(group, records, mine, failure, deadline);
  halving_doubling_all_reduce(group, op, type, data, deadline);
}

void halving_doubling_all_reduce(link& group, reduce_op op, dtype type,
                                 std::span<std::uint8_t> data, link::time_point deadline) {
  reduce_as_ring_does("halving_doubling_all_reduce", op, type, data, group.size(),
                      [&](reduce_op combining, dtype element, std::span<std::uint8_t> bytes) {
                        reduce(group, combining, element, bytes, deadline);
                      });
}

} // namespace lockstep::detail

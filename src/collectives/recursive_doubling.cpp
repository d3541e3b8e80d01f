#include "collectives/recursive_doubling.hpp"

#include "collectives/byte_reduction.hpp"
#include "collectives/core_pacing.hpp"
#include "collectives/peer_agreement.hpp"
#include "collectives/power_of_two_core.hpp"
#include "collectives/ring_collectives.hpp"
#include "collectives/thread_scratch.hpp"
#include "runtime/fault_injection.hpp"

#include "lockstep/error.hpp"

#include <string>

namespace lockstep::detail {

namespace {

/// The all-reduce of a non-half type, MEAN already a SUM.
void reduce(link& group, reduce_op op, dtype type, std::span<std::uint8_t> data,
            link::time_point deadline) {
  const auto rank = group.rank();
  const power_of_two_core layout(group.size());
  if (layout.world == 1 || data.empty())
    return;
  if (layout.folded_out(rank)) {
    group.send(rank + 1, data, deadline);
    group.receive(rank + 1, data, deadline);
    return;
  }
  const std::span scratch(reinterpret_cast<std::uint8_t*>(thread_scratch(data.size())),
                          data.size());
  if (layout.folds_in(rank)) {
    group.receive(rank - 1, scratch, deadline);
    combine_ordered(op, type, data, scratch, false); // x_{r-1} op x_r
  }
  const auto v = layout.virtual_rank(rank);
  for (std::size_t m = 1; m < layout.core; m *= 2) {
    const auto peer = layout.rank_of(v ^ m);
    pace_step(group, peer, doubling_behind(layout, v, m), doubling_behind(layout, v ^ m, m),
              data.size(), deadline);
    group.exchange(peer, data, peer, scratch, deadline);
    combine_ordered(op, type, data, scratch, (v & m) == 0);
    if (m == 1)
      fault_point("reduce-scatter");
  }
  if (layout.folds_in(rank))
    group.send(rank - 1, data, deadline);
}

} // namespace

void recursive_doubling_all_reduce(link& group, ring_records& records,
                                   const collective_fingerprint& mine,
                                   const std::exception_ptr& failure, reduce_op op, dtype type,
                                   std::span<std::uint8_t> data, link::time_point deadline) {
  reduce_as_ring_does("recursive_doubling_all_reduce", op, type, data, group.size(),
                      [&](reduce_op combining, dtype element, std::span<std::uint8_t> bytes) {
                        const auto world = group.size();
                        if (world > 1 && all_reduce_gathers(world, bytes.size(), element)) {
                          // The data rides in the records: log2 steps in all.
                          peer_agree(group, records, mine, failure, bytes, deadline);
                          reduce_gathered(records, group.rank(), world, combining, element,
                                          bytes);
                          return;
                        }
                        peer_agree(group, records, mine, failure, deadline);
                        reduce(group, combining, element, bytes, deadline);
                      });
}

void recursive_doubling_all_reduce(link& group, reduce_op op, dtype type,
                                   std::span<std::uint8_t> data, link::time_point deadline) {
  reduce_as_ring_does("recursive_doubling_all_reduce", op, type, data, group.size(),
                      [&](reduce_op combining, dtype element, std::span<std::uint8_t> bytes) {
                        reduce(group, combining, element, bytes, deadline);
                      });
}

void recursive_doubling_all_gather(link& group, std::span<std::uint8_t> data,
                                   link::time_point deadline) {
  const auto rank = group.rank();
  const power_of_two_core layout(group.size());
  if (data.size() % layout.world != 0)
    throw value_error("recursive_doubling_all_gather: " + std::to_string(data.size())
                      + " bytes are not " + std::to_string(layout.world) + " equal blocks");
  const auto block = data.size() / layout.world;
  if (layout.world == 1 || block == 0)
    return;
  // The blocks of the ranks that virtual ranks first .. first + m - 1 stand for.
  const auto blocks_of = [&](std::size_t first, std::size_t m) {
    const auto begin = layout.first(first);
    return data.subspan(begin * block, (layout.end(first + m - 1) - begin) * block);
  };
  if (layout.folded_out(rank)) {
    group.send(rank + 1, data.subspan(rank * block, block), deadline);
    group.receive(rank + 1, data, deadline);
    return;
  }
  if (layout.folds_in(rank))
    group.receive(rank - 1, data.subspan((rank - 1) * block, block), deadline);
  const auto v = layout.virtual_rank(rank);
  for (std::size_t m = 1; m < layout.core; m *= 2) {
    const auto peer = layout.rank_of(v ^ m);
    group.exchange(peer, blocks_of(v & ~(m - 1), m), peer, blocks_of((v ^ m) & ~(m - 1), m),
                   deadline);
    if (m == 1)
      fault_point("all-gather");
  }
  if (layout.folds_in(rank))
    group.send(rank - 1, data, deadline);
}

} // namespace lockstep::detail

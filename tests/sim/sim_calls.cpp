#include "sim_calls.hpp"

#include "collectives/binomial_tree.hpp"
#include "collectives/halving_doubling.hpp"
#include "collectives/peer_agreement.hpp"
#include "collectives/recursive_doubling.hpp"
#include "collectives/ring_collectives.hpp"

#include "lockstep/error.hpp"

namespace lockstep::detail::sim {

namespace {

collective_fingerprint fingerprint(collective_kind kind, std::size_t bytes) {
  collective_fingerprint f;
  f.seq = 1;
  f.op = std::string{to_string(kind)};
  f.reduction = kind == collective_kind::all_reduce ? "sum" : "";
  f.dtype = dtype::i32;
  f.shape = {static_cast<std::int64_t>(bytes / 4)};
  return f;
}

} // namespace

void run_call(link& group, collective_kind kind, algorithm a, bool agreed,
              std::span<std::uint8_t> data, link::time_point deadline) {
  thread_local ring_records records; // kept between calls, as a communicator keeps them
  const auto mine = fingerprint(kind, data.size());
  if (kind == collective_kind::all_reduce) {
    switch (a) {
      case algorithm::ring:
        if (agreed)
          ring_all_reduce(group, records, mine, nullptr, reduce_op::sum, dtype::i32, data,
                          deadline);
        else
          ring_all_reduce(group, reduce_op::sum, dtype::i32, data, deadline);
        return;
      case algorithm::recursive_doubling:
        if (agreed)
          recursive_doubling_all_reduce(group, records, mine, nullptr, reduce_op::sum,
                                        dtype::i32, data, deadline);
        else
          recursive_doubling_all_reduce(group, reduce_op::sum, dtype::i32, data, deadline);
        return;
      case algorithm::halving_doubling:
        if (agreed)
          halving_doubling_all_reduce(group, records, mine, nullptr, reduce_op::sum, dtype::i32,
                                      data, deadline);
        else
          halving_doubling_all_reduce(group, reduce_op::sum, dtype::i32, data, deadline);
        return;
      case algorithm::binomial_tree:
        break;
    }
  }
  const bool ring = a == algorithm::ring;
  if (agreed && ring)
    ring_agree(group, records, mine, nullptr, deadline);
  else if (agreed)
    peer_agree(group, records, mine, nullptr, deadline);
  if (kind == collective_kind::all_gather && ring)
    return ring_all_gather(group, data, deadline);
  if (kind == collective_kind::all_gather && a == algorithm::recursive_doubling)
    return recursive_doubling_all_gather(group, data, deadline);
  if (kind == collective_kind::broadcast && ring)
    return ring_broadcast(group, 0, data, deadline);
  if (kind == collective_kind::broadcast && a == algorithm::binomial_tree)
    return binomial_tree_broadcast(group, 0, data, deadline);
  throw value_error("algorithm " + std::string{to_string(a)} + " cannot run "
                    + std::string{to_string(kind)});
}

} // namespace lockstep::detail::sim

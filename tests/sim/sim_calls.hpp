#pragma once

// sim_calls: one call of each algorithm that algorithm_choice.hpp knows,
// for the all-reduce (int32 SUM), the all-gather and the broadcast (from
// rank 0), as the test and the benchmark run them on a simulated cluster:
// bare (the algorithm alone: cost_of) or agreed (the agreement the
// communicator runs first, then the data: call_cost).

#include "collectives/algorithm_choice.hpp"
#include "transport/link.hpp"

#include <cstdint>
#include <span>

namespace lockstep::detail::sim {

/// The collectives the simulated cluster runs (reduce_scatter has the
/// ring only: nothing to choose).
inline constexpr collective_kind simulated_kinds[] = {
  collective_kind::all_reduce, collective_kind::all_gather, collective_kind::broadcast};

/// Runs `a` for `kind` on `group`: `data` is the all-reduce's int32
/// buffer, the all-gather's world blocks (this rank's filled), the
/// broadcast's buffer (rank 0's filled). Throws what the algorithm throws.
void run_call(link& group, collective_kind kind, algorithm a, bool agreed,
              std::span<std::uint8_t> data, link::time_point deadline);

} // namespace lockstep::detail::sim

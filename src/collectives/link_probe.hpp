#pragma once

// link_probe: α and β of a group's links (algorithm_choice.hpp), measured
// once at start-up by rank 0 against rank 1 and sent to every rank, so
// that all ranks choose with the same numbers. Written against a link
// (transport/link.hpp), so it measures whatever carries the group: TCP
// between workers, or a simulated network on simulated time.
//
//   α  half the median round trip of an 8-byte message (probe_round_trips)
//   β  probe_bytes each way in one exchange, the median of
//      probe_transfers: β = bytes / (time - α)
//   γ  probe_bytes of float32 added to as many, the median of
//      probe_transfers, on rank 0 alone: γ = bytes / time
//
// Rank 1 echoes; then rank 0 broadcasts the three (binomial tree) to all.
// A group of one rank has no links: it gets {0, +inf, 0}.

#include <cstddef>
#include <string_view>

#include "collectives/algorithm_choice.hpp"
#include "transport/link.hpp"

namespace lockstep::detail {

inline constexpr std::size_t probe_round_trips = 15;
inline constexpr std::size_t probe_transfers = 5;
inline constexpr std::size_t probe_bytes = std::size_t{4} << 20;

/// Every rank of `group` calls it; returns the same α and β on every rank.
/// Throws the link's errors (link_closed, link_deadline_passed).
link_costs probe_link_costs(link& group, link::time_point deadline);

/// LOCKSTEP_LINK_COSTS's text, "ALPHA_US,BETA_GBPS[,GAMMA_GBPS]" (e.g.
/// "30,2.5": 30 µs and 2.5 GB/s, combining free), each positive and
/// finite; value_error naming the text.
link_costs parse_link_costs(std::string_view text);

} // namespace lockstep::detail

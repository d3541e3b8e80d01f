#pragma once

// algorithm_choice: which algorithm runs a collective between workers,
// from the α-β cost model (docs/algorithms.md, "The cost model"). A step
// in which each rank sends and receives at most one message costs
// α + m/β, m the largest message of the step; an algorithm costs its
// steps × α plus its critical bytes ÷ β, the critical bytes being the sum
// over its steps of the step's largest message (for the symmetric
// algorithms, the bytes on the busiest link; for the ring broadcast and
// the tree, the chain of sends). Where ranks combine at the speed they
// send (loopback, shared hosts) the bytes each combines count too, at γ
// (the α-β-γ model of Thakur, Rabenseifner and Gropp 2005), so that two
// algorithms that move the same bytes are told apart by the combining
// they cost. The choice adds the agreement that
// every collective between workers starts with (the ring's around the
// ring, the others' by recursive doubling; the ring's small all-reduce
// and the recursive-doubling all-reduce carry their data in it), and
// takes the cheapest, so it depends only on (collective, ranks, bytes,
// α, β): every rank that holds the same α and β picks the same algorithm
// for every call. No clock, no I/O: the simulated cluster
// (tests/sim) checks these costs against SimGrid.

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace lockstep::detail {

enum class collective_kind { all_reduce, all_gather, broadcast, reduce_scatter };

enum class algorithm {
  ring,               ///< collectives/ring_collectives.hpp
  recursive_doubling, ///< collectives/recursive_doubling.hpp
  halving_doubling,   ///< collectives/halving_doubling.hpp (Rabenseifner)
  binomial_tree,      ///< collectives/binomial_tree.hpp (broadcast)
};

inline constexpr std::size_t collective_kinds = 4;
inline constexpr std::size_t algorithm_count = 4;

std::string_view to_string(collective_kind kind) noexcept;
std::string_view to_string(algorithm a) noexcept;

/// α and β of the links between ranks, and γ, what combining costs.
struct link_costs {
  double alpha_s = 0;            ///< seconds per message (latency)
  double beta_bytes_per_s = 0;   ///< bytes per second of one link
  /// Bytes per second a rank combines (a float32 SUM); 0: free, the plain
  /// α-β model (the simulated cluster's, whose clock does not see it).
  double gamma_bytes_per_s = 0;
};

/// An algorithm's steps, critical bytes and the bytes combined on its
/// critical path (the file comment). A log-step algorithm off a power of
/// two paces its steps from link::paced_from() bytes (core_pacing.hpp),
/// as the call's size `call_bytes` decides: paced, it costs `paced_steps`
/// more α; unpaced, each step that would pace shares a link, and its
/// message (`unpaced_bytes` in all) crosses it once more.
struct algorithm_cost {
  std::size_t steps = 0;
  double bytes = 0;
  double combined = 0;
  std::size_t paced_steps = 0;
  double unpaced_bytes = 0;
  std::size_t call_bytes = 0;

  double seconds(const link_costs& link) const;
};

/// The size from which a call is paced under `link`: its bandwidth-delay
/// product α·β, from which an α costs less than the bytes a step would
/// share a link with; SIZE_MAX where α or β is unknown (0).
std::size_t paced_from_bytes(const link_costs& link);

/// The algorithms that can run `kind`, in the order the choice prefers
/// them on equal cost.
std::span<const algorithm> algorithms_for(collective_kind kind) noexcept;

/// The algorithm of that name ("ring", ..); none for another text.
std::optional<algorithm> algorithm_named(std::string_view name);

/// Whether `a` can run `kind` (one of algorithms_for(kind)).
bool runs(collective_kind kind, algorithm a);

/// What `a` alone costs for `kind` on `ranks` ranks: `bytes` per rank for
/// an all-reduce and a broadcast, the whole buffer (all blocks) for an
/// all-gather and for a reduce-scatter's input. Throws value_error when
/// `a` cannot run `kind`.
algorithm_cost cost_of(collective_kind kind, algorithm a, std::size_t ranks, std::size_t bytes);

/// A record's size in the agreement (fingerprint and framing): about this.
inline constexpr std::size_t default_record_bytes = 128;

/// What a call costs with `a`: its agreement (records of `record_bytes`)
/// and its data, as the communicator runs them.
algorithm_cost call_cost(collective_kind kind, algorithm a, std::size_t ranks, std::size_t bytes,
                         std::size_t record_bytes = default_record_bytes);

/// The cheapest algorithm for a call (call_cost under `link`).
algorithm choose_algorithm(collective_kind kind, std::size_t ranks, std::size_t bytes,
                           const link_costs& link);

/// LOCKSTEP_ALGORITHM: one algorithm for every collective that can run it
/// ("ring"), or per collective ("all_reduce=recursive_doubling,
/// broadcast=binomial_tree"); "auto" or empty: the choice. A forced
/// algorithm that cannot run a collective leaves that one to the choice
/// when it was given for all, and is a value_error when given for it.
struct algorithm_override {
  std::array<std::optional<algorithm>, collective_kinds> forced;

  std::optional<algorithm> for_kind(collective_kind kind) const {
    return forced[static_cast<std::size_t>(kind)];
  }
};

/// Parses LOCKSTEP_ALGORITHM's text; value_error naming what is wrong.
algorithm_override parse_algorithm_override(std::string_view text);

/// The canonical text of `forced`: "auto" when nothing is forced, else
/// "kind=algorithm" pairs in the order of collective_kind ("all_reduce=
/// ring,broadcast=ring"), so that workers compare what they mean.
std::string to_string(const algorithm_override& forced);

/// The algorithm a call runs: the override's, else the choice.
algorithm pick_algorithm(collective_kind kind, std::size_t ranks, std::size_t bytes,
                         const link_costs& link, const algorithm_override& forced);

} // namespace lockstep::detail

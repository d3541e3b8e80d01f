#pragma once

// sim_cluster: runs one simulation: a platform (sim_platform.hpp), one S4U
// actor per host, each running `work` on its rank's sim_link, until every
// actor is done. SimGrid's engine is one per process and cannot be built
// twice, so each simulation runs in a child process (fork), which sends
// back what each rank did; the caller's process never starts SimGrid.
// `work` returns a problem it found (empty: none), so that a test's
// checks of the data on each rank come back as text.

#include "sim_link.hpp"
#include "sim_platform.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace lockstep::detail::sim {

/// What one rank did.
struct rank_outcome {
  bool stopped = false;     ///< its host stopped (sim_network::stop_rank)
  std::string error_type;   ///< link_deadline_passed, link_closed, value_error,
                            ///< other (empty: none)
  std::string error;        ///< what() of what it threw
  std::string problem;      ///< what `work` returned
  double end_s = 0;         ///< simulated time when it returned or threw
};

struct simulation {
  std::vector<rank_outcome> ranks;
  /// The latest end of a rank whose host did not stop.
  double seconds() const;
  /// The first rank's problem or unexpected error, "" when none.
  std::string first_problem() const;
};

using rank_work = std::function<std::string(sim_link&)>;

/// Runs `work` on every rank of `spec`'s cluster, with `network`'s switches
/// (its size is set to spec.hosts). Throws std::runtime_error when the
/// child process fails (naming what it said).
simulation simulate(const platform_spec& spec, sim_network network, const rank_work& work);

} // namespace lockstep::detail::sim

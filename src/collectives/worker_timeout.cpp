#include "collectives/worker_timeout.hpp"

#include "runtime/error_text.hpp"

#include <string>
#include <vector>

namespace lockstep::detail {

error_value worker_timeout(const collective_fingerprint& f, std::size_t worker,
                           std::chrono::milliseconds timeout,
                           std::span<const std::uint64_t> reached) {
  // The collective as the user knows it: its number among the collectives
  // between the workers (every worker counts them alike), not a replica
  // group's or a fan-out's.
  auto text = f.op + " #" + std::to_string(f.seq) + " between the workers ("
              + f.details(false).substr(1) + ") timed out on worker " + std::to_string(worker)
              + " after " + std::to_string(timeout.count()) + " ms (its timeout): ";
  std::vector<std::string> missing, where, silent;
  for (std::size_t w = 0; w < reached.size(); ++w) {
    if (w == worker)
      continue;
    if (reached[w] == no_progress_answer) {
      silent.push_back(std::to_string(w));
    } else if (reached[w] < f.seq) {
      missing.push_back(std::to_string(w));
      if (where.size() <= items_in_errors)
        where.push_back("worker " + std::to_string(w)
                        + (reached[w] == 0 ? " has issued none"
                                           : " last issued #" + std::to_string(reached[w])));
    }
  }
  std::vector<std::string> parts;
  if (reached.empty())
    parts.push_back("the other workers could not be asked which collectives they reached");
  if (!missing.empty())
    parts.push_back(workers_text(missing) + " did not reach it ("
                    + joined_list(where, items_in_errors, missing.size()) + ")");
  if (!silent.empty())
    parts.push_back(workers_text(silent) + " did not answer in time (frozen, or unreachable)");
  if (parts.empty())
    parts.push_back("every worker reached it, and its data stalled");
  for (std::size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : "; ") + parts[i];
  return {error_kind::timeout_error, std::move(text), "lockstep::timeout_error"};
}

} // namespace lockstep::detail

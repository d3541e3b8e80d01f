// The workers' agreement on checkpoints: see checkpoint_agreement.hpp.

#include "checkpoints/checkpoint_agreement.hpp"

#include "runtime/error_text.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace lockstep::detail {

namespace {

/// Every worker's `mine`, worker w's at [w·size, (w + 1)·size): each adds
/// its values at its own place in one sum over the workers.
std::vector<std::int64_t> gather(const worker_agreement& workers,
                                 std::span<const std::int64_t> mine, std::exception_ptr failure,
                                 const std::string& tag) {
  std::vector<std::int64_t> all(workers.workers * mine.size(), 0);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(workers.index * mine.size()));
  workers.sum(all, std::move(failure), tag);
  return all;
}

/// True when every worker's group of `size` values equals worker 0's.
bool all_alike(const std::vector<std::int64_t>& all, std::size_t size) {
  for (std::size_t at = size; at < all.size(); at += size)
    if (!std::equal(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(size),
                    all.begin() + static_cast<std::ptrdiff_t>(at)))
      return false;
  return true;
}

} // namespace

void agree_on_saved_step(const worker_agreement& workers, std::int64_t step,
                         std::exception_ptr failure) {
  const std::int64_t mine[] = {step};
  // The tag names no step: the steps must meet in one collective to be
  // compared.
  const auto steps = gather(workers, mine, std::move(failure), "checkpoint step");
  if (all_alike(steps, 1))
    return;
  std::string listed;
  for (std::size_t w = 0; w < steps.size(); ++w)
    listed += (w == 0 ? "worker " : ", worker ") + std::to_string(w) + " step "
              + std::to_string(steps[w]);
  throw value_error("checkpoint_manager: the workers save different steps (" + listed
                    + "); a checkpoint is written only when every worker saves the same step");
}

void confirm_saved_step(const worker_agreement& workers, std::exception_ptr failure) {
  std::int64_t nothing[] = {0};
  workers.sum(nothing, std::move(failure), "checkpoint written");
}

void agree_on_resume(const worker_agreement& workers, const std::optional<found_checkpoint>& mine,
                     std::exception_ptr failure, const std::filesystem::path& directory) {
  // Per worker: found (0 or 1), the step, the digest.
  const std::int64_t values[] = {mine ? 1 : 0, mine ? mine->step : 0,
                                 mine ? static_cast<std::int64_t>(mine->digest) : 0};
  const auto all = gather(workers, values, std::move(failure), "checkpoint to resume from");
  if (all_alike(all, 3))
    return;
  std::string listed;
  for (std::size_t w = 0; w < workers.workers; ++w) {
    const auto* found = all.data() + 3 * w;
    char digest[16];
    std::snprintf(digest, sizeof digest, "%08x", static_cast<unsigned>(found[2]));
    listed += (w == 0 ? "worker " : "; worker ") + std::to_string(w)
              + (found[0] != 0 ? " has step " + std::to_string(found[1]) + " (contents " + digest + ")"
                               : std::string(" has none"));
  }
  throw io_error("checkpoint_manager: the workers find different newest checkpoints in "
                 + in_quotes(directory) + " (" + listed
                 + "); every worker must see the same checkpoint folder to resume together");
}

} // namespace lockstep::detail

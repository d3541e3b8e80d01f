#pragma once

// The workers' agreement on checkpoints (checkpoint_manager, multi-worker):
// a save is a two-phase commit, in which the chief's file comes into view
// only once every worker has said it saves the same step, and every worker
// returns from the save only once the file is in view; workers resume
// only from a checkpoint every one of them found alike (the same step, the
// same contents). Each agreement is one sum over the workers, so every
// worker learns every worker's word and raises the same error, naming
// them, when they differ.

#include "lockstep/input_context.hpp"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>

namespace lockstep::detail {

/// The workers of a multi-worker strategy, for the agreements.
struct worker_agreement {
  worker_sum sum; // strategy_state::sum_over_workers()
  std::size_t workers = 1;
  std::size_t index = 0; // this worker's
};

/// Before the chief's checkpoint of `step` is renamed into view (and on
/// the others, at the same point of their save): value_error on every
/// worker when their steps differ. With `failure` (the chief's save
/// failed), every worker throws that error instead.
void agree_on_saved_step(const worker_agreement& workers, std::int64_t step,
                         std::exception_ptr failure);

/// After the chief's rename: every worker returns once the checkpoint is in
/// view. With `failure` (the chief's rename or clean-up failed), every
/// worker throws that error instead.
void confirm_saved_step(const worker_agreement& workers, std::exception_ptr failure);

/// What a worker found to resume from: its newest checkpoint's step and a
/// digest of its contents, or nothing.
struct found_checkpoint {
  std::int64_t step = 0;
  std::uint32_t digest = 0;
};

/// Before any worker restores: io_error on every worker, naming each
/// worker's find, when they differ (the folder is not the same for all);
/// with `failure` (a worker could not read its newest), every worker
/// throws that error instead.
void agree_on_resume(const worker_agreement& workers, const std::optional<found_checkpoint>& mine,
                     std::exception_ptr failure, const std::filesystem::path& directory);

} // namespace lockstep::detail

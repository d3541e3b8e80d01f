#pragma once

#include "lockstep/context.hpp"
#include "lockstep/strategy.hpp"
#include "lockstep/variable.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep {

/// What a checkpoint says about itself: its header's `__metadata__`
/// (all strings: "step", "strategy", "replicas", "format"), and the step.
struct checkpoint_info {
  /// Unset for a file that records none (e.g. written by another tool).
  std::optional<std::int64_t> step;
  std::map<std::string, std::string> metadata;
};

/// Saves `variables` to one file in the safetensors format, atomically: a
/// crash or kill during the save leaves the previous file at `path` intact.
/// Each variable is stored under its name: a mirrored variable's primary
/// copy, a sync-on-read variable's aggregate (its primary when the
/// aggregation is NONE), a plain variable's value. value_error when two
/// variables share a name; io_error when the file cannot be written. Call
/// it in cross-replica or default context.
void save(const std::filesystem::path& path, const std::vector<variable>& variables,
          std::int64_t step);

/// Restores `variables` from a file written by `save` (or any safetensors
/// file with those names): mirrored and plain variables get the value on
/// every copy; sync-on-read variables get TF's rule (SUM: the value divided
/// among the copies; otherwise the value on each). Everything is checked
/// before anything is written, so on error the variables are unchanged:
/// data_loss_error for a truncated or corrupted file, value_error for a
/// missing variable, dtype_error / shape_error for a mismatch, each naming
/// the variable and the problem.
checkpoint_info restore(const std::filesystem::path& path, const std::vector<variable>& variables);

/// The metadata of a checkpoint file, checked as `restore` does.
checkpoint_info read_checkpoint_info(const std::filesystem::path& path);

/// TF's CheckpointManager: checkpoints named by step in one directory,
/// `ckpt-<step>.safetensors`, of which the newest `max_to_keep` are kept.
/// Optimizer slots are variables: pass them with the model's variables.
/// Only a worker whose strategy says `should_checkpoint()` writes (the
/// chief, once there are several workers); the others' `save` does nothing.
class checkpoint_manager {
public:
  /// Creates `directory` if needed and removes temporaries left by saves
  /// that crashed. value_error for max_to_keep == 0.
  checkpoint_manager(std::filesystem::path directory, std::size_t max_to_keep,
                     lockstep::strategy strategy = get_strategy());

  /// Saves a checkpoint for `step` (replacing one of the same step) and
  /// deletes the others with the smallest steps beyond max_to_keep (the one
  /// just written is always kept); the path written, or nullopt when this
  /// worker does not checkpoint. value_error for a negative step.
  std::optional<std::filesystem::path> save(const std::vector<variable>& variables,
                                            std::int64_t step);

  /// The checkpoints in the directory, oldest (smallest step) first.
  std::vector<std::filesystem::path> checkpoints() const;

  /// The checkpoint with the largest step, if any.
  std::optional<std::filesystem::path> latest() const;

  /// Restores the newest checkpoint; nullopt (variables untouched) if there
  /// is none.
  std::optional<checkpoint_info> restore_latest(const std::vector<variable>& variables) const;

  const std::filesystem::path& directory() const noexcept { return directory_; }

private:
  std::filesystem::path directory_;
  std::size_t max_to_keep_;
  lockstep::strategy strategy_;
};

} // namespace lockstep

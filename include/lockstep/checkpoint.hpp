#pragma once

#include "lockstep/context.hpp"
#include "lockstep/strategy.hpp"
#include "lockstep/variable.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lockstep {

namespace detail {
class folder_lock;
} // namespace detail

/// The checkpoint format `save` writes ("lockstep-checkpoint-2": every
/// tensor and the header carry a checksum). Files of the previous format,
/// "lockstep-checkpoint-1" (no header checksum), are still read, with a
/// warning in the log.
inline constexpr const char* checkpoint_format = "lockstep-checkpoint-2";

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
/// aggregation is NONE), a plain variable's value. Every tensor carries a
/// crc32, and so does the header (the step and the checksums included).
/// value_error when two variables share a name, for a negative step, for a
/// file named `ckpt-<n>.safetensors` with n other than `step`, and for a
/// float variable holding NaN or an infinity (naming the variable and the
/// element: such a checkpoint could not be trained from); io_error when the
/// file cannot be written. Call it in cross-replica or default context.
void save(const std::filesystem::path& path, const std::vector<variable>& variables,
          std::int64_t step);

/// Restores `variables` from a file written by `save` (or any safetensors
/// file with those names): mirrored and plain variables get the value on
/// every copy; sync-on-read variables get TF's rule (SUM: the value divided
/// among the copies; otherwise the value on each). The whole file is
/// checked before anything is written, so on error the variables are
/// unchanged: data_loss_error naming the file and the part (header length,
/// header, metadata, tensor) for a truncated or corrupted file, including a
/// missing checksum, a negative or non-integer step, or a step that differs
/// from the one in a `ckpt-<n>.safetensors` name; io_error for a file that
/// cannot be opened or is not a regular file (a FIFO or device is refused
/// without blocking); resource_error naming the file and the bytes when
/// memory runs out; value_error for a missing variable, dtype_error /
/// shape_error for a mismatch, each naming the variable and the problem.
/// The header is validated, and the file's size checked against it, before
/// any tensor memory is allocated.
checkpoint_info restore(const std::filesystem::path& path, const std::vector<variable>& variables);

/// The metadata of a checkpoint file, checked as `restore` checks the file
/// (every checksum verified, reading the tensors through a small buffer
/// rather than into memory), with the same errors.
checkpoint_info read_checkpoint_info(const std::filesystem::path& path);

/// TF's CheckpointManager: checkpoints named by step in one directory,
/// `ckpt-<step>.safetensors`, of which the newest `max_to_keep` are kept.
/// Optimizer slots are variables: pass them with the model's variables.
/// Only a worker whose strategy says `should_checkpoint()` writes (the
/// chief, once there are several workers).
///
/// Several workers (multi_worker_mirrored_strategy) call `save` and
/// `restore_latest` together, as collectives: a save is a two-phase commit
/// in which the chief's file comes into view only after every worker said
/// it saves the same step (value_error on every worker, naming each one's
/// step, when they differ), and every worker returns once it is in view;
/// a worker lost during a save (peer_lost_error) leaves the previous
/// checkpoints the newest. `restore_latest` resumes every worker from the
/// same checkpoint or none: io_error on every worker, naming what each
/// found, when their newest differ in step or contents (their folders are
/// not the same); an unreadable newest on one worker is its error on all.
///
/// A folder may be shared by several processes (in other containers or on
/// other hosts, too, where the file system supports flock): any number
/// restore from it without a lock, and one at a time writes. The first
/// `save` takes the folder's writer lock (an flock on the file
/// `.lockstep-writer.lock` in it) and the manager holds it until it is
/// destroyed; a second writer's `save` fails with io_error naming the
/// folder and saying that another writer holds it. A manager is used from
/// one thread at a time. Move-only (it may hold the lock).
class checkpoint_manager {
public:
  /// Creates `directory` if needed and removes temporaries left by saves
  /// that crashed: only those it can lock without waiting, so a live
  /// writer's save in progress, in any process, is left alone. Takes no
  /// lock. value_error for max_to_keep == 0.
  checkpoint_manager(std::filesystem::path directory, std::size_t max_to_keep,
                     lockstep::strategy strategy = get_strategy());

  checkpoint_manager(checkpoint_manager&&) noexcept;
  checkpoint_manager& operator=(checkpoint_manager&&) noexcept;
  checkpoint_manager(const checkpoint_manager&) = delete;
  checkpoint_manager& operator=(const checkpoint_manager&) = delete;
  /// Releases the writer lock, if this manager took it.
  ~checkpoint_manager();

  /// Saves a checkpoint for `step` (replacing one of the same step) and
  /// deletes the others with the smallest steps beyond max_to_keep (the one
  /// just written is always kept); the path written, or nullopt when this
  /// worker does not checkpoint (it still takes part in the agreement). Takes the folder's writer lock on the
  /// first call. value_error for a negative step; io_error when another
  /// writer holds the folder; the errors of `lockstep::save`.
  std::optional<std::filesystem::path> save(const std::vector<variable>& variables,
                                            std::int64_t step);

  /// The checkpoints in the directory, oldest (smallest step) first.
  std::vector<std::filesystem::path> checkpoints() const;

  /// The checkpoint with the largest step, if any (readable or not).
  std::optional<std::filesystem::path> latest() const;

  /// The checkpoint with the largest step that reads without error
  /// (`read_checkpoint_info`: header, every checksum, the step against the
  /// name), if any; unreadable ones are skipped. It reads each candidate
  /// through a small buffer, newest first.
  std::optional<std::filesystem::path> newest_readable() const;

  /// Restores the newest checkpoint; nullopt (variables untouched) if there
  /// is none. When the newest is unreadable (corrupt, truncated, not a
  /// regular file, an unsupported dtype), throws data_loss_error naming it
  /// and the reason, and naming the newest readable checkpoint ("the newest
  /// readable checkpoint is <path>") or saying that none is: it never falls
  /// back silently (restore that one explicitly with `restore`). Mismatches
  /// with `variables` and resource_error propagate as `restore` throws them.
  std::optional<checkpoint_info> restore_latest(const std::vector<variable>& variables) const;

  const std::filesystem::path& directory() const noexcept { return directory_; }

private:
  /// Deletes the checkpoints with the smallest steps, other than `kept`,
  /// beyond max_to_keep.
  void remove_beyond_max_to_keep(const std::filesystem::path& kept) const;

  std::filesystem::path directory_;
  std::size_t max_to_keep_;
  lockstep::strategy strategy_;
  /// The folder's writer lock, from the first save on.
  std::unique_ptr<detail::folder_lock> writer_lock_;
};

} // namespace lockstep

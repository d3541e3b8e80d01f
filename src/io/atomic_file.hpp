#pragma once

// Crash-safe replacement of a file, for checkpoints: readers of `path` see
// the old contents or the new ones, never a mix, whenever the writer dies.

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string_view>

namespace lockstep::detail {

/// Replaces `path` with `bytes` atomically: writes a temporary file in the
/// same directory, fsyncs it, renames it over `path` and fsyncs the
/// directory. A crash at any point leaves either the old file or the new
/// one (and perhaps a temporary, see `is_atomic_write_temporary`). A failure
/// throws io_error, naming the call, the file it acted on and the system's
/// reason, and removes the temporary file. Safe to call from several
/// threads at once, even for one path: each call has its own temporary, and
/// the last rename wins.
///
/// `before_rename`, when given, runs once the temporary is complete and
/// fsynced, just before the rename: the caller's last say (the workers'
/// agreement on a checkpoint). An exception from it is a failure: the
/// temporary is removed and `path` left as it was.
///
/// The writer holds an exclusive `flock` on its temporary from just after
/// creating it until after the rename, so that
/// `remove_abandoned_temporaries`, in this process or any other sharing the
/// directory (another container, another host on a file system with flock),
/// can tell a live writer's temporary from a crashed one's: a process id
/// means nothing across containers or hosts, a lock held by a live process
/// does. Should a cleaner delete the temporary between its creation and the
/// lock, the writer notices (the name no longer leads to its file) and
/// starts again with a new temporary.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           const std::function<void()>& before_rename = {});

/// Removes the temporaries of `write_file_atomically` in `directory` whose
/// writers are gone: each one it can lock without waiting (flock,
/// LOCK_EX | LOCK_NB); a temporary whose writer is alive and holds its lock
/// is left alone, so a process that opens a shared directory never breaks
/// another's save in progress. Best effort: a temporary that cannot be
/// opened or removed (a read-only directory, say) is skipped, since the
/// caller may only read. Returns how many it removed.
std::size_t remove_abandoned_temporaries(const std::filesystem::path& directory);

/// The stages at which the test seam of `write_file_atomically` runs.
enum class atomic_write_stage {
  /// Half of the bytes (rounded down) are in the temporary file.
  partial_write,
  /// The temporary is written, fsynced and closed, but not yet renamed.
  before_rename,
};

/// Test seam: `hook` is called at each stage of every later
/// `write_file_atomically` (nullptr removes it), while the writer holds the
/// temporary's lock. An exception from `hook` leaves
/// `write_file_atomically` as a failure does: the temporary file is removed
/// and `path` is untouched. A hook may block (a test pauses a writer in
/// another process with it). Not thread-safe; tests only.
void set_atomic_write_hook(std::function<void(atomic_write_stage)> hook);

/// True for the names `write_file_atomically` gives its temporary files,
/// `<filename>.tmp.<pid>.<counter>`, so a directory scan can skip them and
/// clean up after a crash.
bool is_atomic_write_temporary(const std::filesystem::path& path);

} // namespace lockstep::detail

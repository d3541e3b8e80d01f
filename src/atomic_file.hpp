#pragma once

// Crash-safe replacement of a file, for checkpoints: readers of `path` see
// the old contents or the new ones, never a mix, whenever the writer dies.

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
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

/// The stages at which the test seam of `write_file_atomically` runs.
enum class atomic_write_stage {
  /// Half of the bytes (rounded down) are in the temporary file.
  partial_write,
  /// The temporary is written, fsynced and closed, but not yet renamed.
  before_rename,
};

/// Test seam: `hook` is called at each stage of every later
/// `write_file_atomically` (nullptr removes it). An exception from `hook`
/// leaves `write_file_atomically` as a failure does: the temporary file is
/// removed and `path` is untouched. Not thread-safe; tests only.
void set_atomic_write_hook(std::function<void(atomic_write_stage)> hook);

/// True for the names `write_file_atomically` gives its temporary files,
/// `<filename>.tmp.<pid>.<counter>`, so a directory scan can skip them and
/// clean up after a crash.
bool is_atomic_write_temporary(const std::filesystem::path& path);

} // namespace lockstep::detail

#pragma once

// The writer lock of a checkpoint folder: one process at a time writes
// checkpoints into a folder, while any number read from it without a lock.

#include <filesystem>
#include <string_view>
#include <utility>

#include "io/file_descriptor.hpp"

namespace lockstep::detail {

/// An exclusive `flock` on the file `lock_file_name` in a folder, held for
/// the object's lifetime (and released by the kernel when the process dies,
/// however it dies). flock, not a pid file: a pid says nothing across
/// containers or hosts, and a lock outlives no crash. The lock file itself
/// stays in the folder: removing it would let two processes lock two
/// different files of one name. Move-only.
class folder_lock {
public:
  /// The name of the lock file in a locked folder.
  static constexpr std::string_view lock_file_name = ".lockstep-writer.lock";

  /// Takes the lock on `folder` without waiting. io_error naming the folder
  /// and saying that another writer holds it when another process (or
  /// another folder_lock in this one) does; io_error naming the call, the
  /// lock file and the system's reason when the lock file cannot be opened
  /// or locked. `user` (e.g. "checkpoint_manager") opens the messages.
  static folder_lock acquire(const std::filesystem::path& folder, std::string_view user);

private:
  explicit folder_lock(file_descriptor fd) noexcept : fd_(std::move(fd)) {}

  /// Closing the only descriptor of the lock file releases the lock.
  file_descriptor fd_;
};

} // namespace lockstep::detail

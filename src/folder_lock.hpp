#pragma once

// The writer lock of a checkpoint folder: one process at a time writes
// checkpoints into a folder, while any number read from it without a lock.

#include <filesystem>
#include <string_view>

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

  folder_lock(folder_lock&& other) noexcept;
  folder_lock& operator=(folder_lock&& other) noexcept;
  folder_lock(const folder_lock&) = delete;
  folder_lock& operator=(const folder_lock&) = delete;
  /// Releases the lock.
  ~folder_lock();

private:
  explicit folder_lock(int fd) noexcept : fd_(fd) {}

  int fd_ = -1;
};

} // namespace lockstep::detail

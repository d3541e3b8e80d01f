#include "io/folder_lock.hpp"

#include "lockstep/error.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

namespace lockstep::detail {

folder_lock folder_lock::acquire(const std::filesystem::path& folder, std::string_view user) {
  const auto lock_path = folder / lock_file_name;
  // O_NOFOLLOW: the lock is this file, not whatever a link points at.
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd == -1) {
    const auto reason = std::generic_category().message(errno);
    throw io_error(std::string(user) + ": cannot open the writer lock \"" + lock_path.string()
                   + "\": " + reason);
  }
  folder_lock lock{file_descriptor{fd}};
  const int result = flock_resuming(fd, LOCK_EX | LOCK_NB);
  if (result == -1 && errno == EWOULDBLOCK)
    throw io_error(std::string(user) + ": another writer holds the checkpoint folder \""
                   + folder.string() + "\" (its lock file " + std::string(lock_file_name)
                   + " is locked): one process at a time may save checkpoints into a folder; "
                     "stop the other writer or use another folder");
  if (result == -1) {
    const auto reason = std::generic_category().message(errno);
    throw io_error(std::string(user) + ": flock failed on the writer lock \""
                   + lock_path.string() + "\": " + reason);
  }
  return lock;
}

} // namespace lockstep::detail

#pragma once

// An owned POSIX file descriptor, and the calls on descriptors that must be
// resumed after a signal interrupts them.

#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace lockstep::detail {

/// Owns a file descriptor (-1: none). The destructor closes it unchecked:
/// it runs on error paths, where a second failure would hide the first, and
/// after reads, where closing has nothing to report. A writer that must
/// know its data reached the file closes `release()` itself, checked.
/// Move-only.
class file_descriptor {
public:
  explicit file_descriptor(int fd = -1) noexcept : fd_(fd) {}

  ~file_descriptor() {
    if (fd_ != -1)
      ::close(fd_);
  }

  file_descriptor(file_descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

  file_descriptor& operator=(file_descriptor&& other) noexcept {
    if (this != &other) {
      if (fd_ != -1)
        ::close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }

  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;

  int get() const noexcept { return fd_; }

  /// Gives up ownership: the descriptor, which the caller now closes.
  int release() noexcept { return std::exchange(fd_, -1); }

private:
  int fd_;
};

/// flock(2), called again when a signal interrupted it.
inline int flock_resuming(int fd, int operation) {
  int result;
  do
    result = ::flock(fd, operation);
  while (result == -1 && errno == EINTR);
  return result;
}

} // namespace lockstep::detail

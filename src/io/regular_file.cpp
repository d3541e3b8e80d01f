#include "io/regular_file.hpp"

#include "runtime/error_text.hpp"

#include "lockstep/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

namespace lockstep::detail {

namespace {

[[noreturn]] void throw_system_error(const char* call, const std::filesystem::path& path) {
  const auto reason = std::generic_category().message(errno);
  throw io_error(std::string(call) + " failed on " + in_quotes(path) + ": " + reason);
}

[[noreturn]] void refuse_type(const std::filesystem::path& path, unsigned mode) {
  throw io_error(in_quotes(path) + " is " + describe_file_type(mode)
                 + ", not a regular file; lockstep reads data and checkpoints only from "
                   "regular files");
}

} // namespace

std::string describe_file_type(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO (named pipe)";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    default:
      return "a file of unknown type";
  }
}

regular_file regular_file::open(const std::filesystem::path& path) {
  // Refuse by type before opening: opening a device can have effects.
  struct stat status {};
  if (::stat(path.c_str(), &status) == -1)
    throw_system_error("stat", path);
  if (!S_ISREG(status.st_mode))
    refuse_type(path, status.st_mode);
  // O_NONBLOCK: should the path have become a FIFO since, open returns at
  // once and the fstat below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd == -1)
    throw_system_error("open", path);
  regular_file file{path, file_descriptor{fd}};
  if (::fstat(fd, &status) == -1)
    throw_system_error("fstat", path);
  if (!S_ISREG(status.st_mode))
    refuse_type(path, status.st_mode);
  file.size_ = static_cast<std::uint64_t>(status.st_size);
  return file;
}

std::size_t regular_file::read_at(std::uint64_t offset, void* into, std::size_t count) const {
  auto* out = static_cast<char*>(into);
  std::size_t done = 0;
  while (done < count) {
    const auto n = ::pread(fd_.get(), out + done, count - done, static_cast<off_t>(offset + done));
    if (n == -1 && errno == EINTR)
      continue;
    if (n == -1)
      throw_system_error("read", path_);
    if (n == 0)
      break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

std::string regular_file::read_all() const {
  std::string bytes(static_cast<std::size_t>(size_), '\0');
  if (read_at(0, bytes.data(), bytes.size()) != bytes.size())
    throw data_loss_error(in_quotes(path_) + ": the file shrank while it was read (from "
                          + std::to_string(size_) + " bytes)");
  return bytes;
}

} // namespace lockstep::detail

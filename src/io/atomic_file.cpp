#include "io/atomic_file.hpp"

#include "io/file_descriptor.hpp"

#include "lockstep/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>

namespace lockstep::detail {

namespace {

// Returns `result` unless it is -1, the POSIX failure value; then throws
// io_error naming the call, the file it acted on and errno's reason.
template <class Result>
Result sys_check(Result result, const char* call, const std::filesystem::path& path,
                 const char* file, int line) {
  if (result != -1)
    return result;
  auto reason = std::generic_category().message(errno);
  throw io_error(std::string(call) + " failed on \"" + path.string() + "\": " + reason + " ("
                 + file + ":" + std::to_string(line) + ")");
}

// Evaluates the POSIX call `call` once and throws io_error, with the call's
// text, if it fails.
#define LOCKSTEP_SYS_CHECK(call, path) sys_check((call), #call, (path), __FILE__, __LINE__)

std::function<void(atomic_write_stage)>& write_hook() {
  static std::function<void(atomic_write_stage)> hook;
  return hook;
}

void run_hook(atomic_write_stage stage) {
  if (const auto& hook = write_hook())
    hook(stage);
}

std::atomic<std::uint64_t> temporary_counter{0};

constexpr std::string_view temporary_infix = ".tmp.";

std::filesystem::path temporary_path_for(const std::filesystem::path& path) {
  auto name = path.filename().string() + std::string(temporary_infix)
              + std::to_string(::getpid()) + "." + std::to_string(temporary_counter++);
  return path.parent_path() / name;
}

// The checked close of the normal path (Linux releases the descriptor even
// when close fails: it is never closed twice).
void close_checked(file_descriptor& file, const std::filesystem::path& path) {
  LOCKSTEP_SYS_CHECK(::close(file.release()), path);
}

// write(2), called again when a signal interrupted it before it wrote anything.
ssize_t write_resuming(int fd, std::string_view bytes) {
  ssize_t written;
  do
    written = ::write(fd, bytes.data(), bytes.size());
  while (written == -1 && errno == EINTR);
  return written;
}

// Writes all of `bytes`, resuming after short writes.
void write_all(const file_descriptor& file, std::string_view bytes,
               const std::filesystem::path& path) {
  while (!bytes.empty()) {
    auto written = LOCKSTEP_SYS_CHECK(write_resuming(file.get(), bytes), path);
    bytes.remove_prefix(static_cast<std::size_t>(written));
  }
}

// Makes the rename durable: it lives in the directory's entries.
void fsync_directory(const std::filesystem::path& file_path) {
  auto directory = file_path.parent_path();
  if (directory.empty())
    directory = ".";
  file_descriptor dir(
    LOCKSTEP_SYS_CHECK(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC), directory));
  LOCKSTEP_SYS_CHECK(::fsync(dir.get()), directory);
  close_checked(dir, directory);
}

// True if `path` (not followed if it is a link) is the file open as `fd`.
bool names_open_file(const std::filesystem::path& path, int fd) {
  struct stat by_name {};
  struct stat by_descriptor {};
  return ::lstat(path.c_str(), &by_name) == 0 && ::fstat(fd, &by_descriptor) == 0
         && by_name.st_dev == by_descriptor.st_dev && by_name.st_ino == by_descriptor.st_ino;
}

// How often write_file_atomically starts again with a new temporary when a
// cleaner removed the previous one before it was locked. Each retry needs a
// cleaner to win a window of two system calls, so this is never reached but
// by a file system whose locks do not work.
constexpr int max_temporary_attempts = 100;

// A new temporary for `path`, created and locked by this process, with its
// name still leading to it; the descriptor and its name.
std::pair<file_descriptor, std::filesystem::path>
create_locked_temporary(const std::filesystem::path& path) {
  for (int attempt = 0; attempt < max_temporary_attempts; ++attempt) {
    auto temporary = temporary_path_for(path);
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd == -1 && errno == EEXIST)
      continue; // left by an earlier process with this pid (a container's pid 1, say)
    file_descriptor file(sys_check(fd, "open(temporary, O_WRONLY | O_CREAT | O_EXCL)", temporary,
                                   __FILE__, __LINE__));
    // Without waiting: a cleaner that locked the new file first is about to
    // remove it, so the writer moves on to another name.
    if (flock_resuming(file.get(), LOCK_EX | LOCK_NB) == -1) {
      if (errno != EWOULDBLOCK)
        LOCKSTEP_SYS_CHECK(-1, temporary); // reports flock's errno
      continue;
    }
    if (names_open_file(temporary, file.get()))
      return {std::move(file), std::move(temporary)};
    // A cleaner removed it between open and flock; the name is free again.
  }
  throw io_error("write_file_atomically: could not keep a locked temporary file next to \""
                 + path.string() + "\" in " + std::to_string(max_temporary_attempts)
                 + " attempts: each name was taken, or removed by another process (does the file "
                   "system support flock?)");
}

bool is_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
}

} // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           const std::function<void()>& before_rename) {
  auto [file, temporary] = create_locked_temporary(path);
  // A second descriptor of the same open file keeps the lock after the
  // checked close of `file` below, until after the rename: a cleaner never
  // sees this temporary unlocked while it is still needed.
  file_descriptor lock_holder;
  try {
    lock_holder = file_descriptor(
      LOCKSTEP_SYS_CHECK(::fcntl(file.get(), F_DUPFD_CLOEXEC, 0), temporary));
    auto half = bytes.size() / 2;
    write_all(file, bytes.substr(0, half), temporary);
    run_hook(atomic_write_stage::partial_write);
    write_all(file, bytes.substr(half), temporary);
    LOCKSTEP_SYS_CHECK(::fsync(file.get()), temporary);
    close_checked(file, temporary);
    run_hook(atomic_write_stage::before_rename);
    if (before_rename)
      before_rename();
    LOCKSTEP_SYS_CHECK(::rename(temporary.c_str(), path.c_str()), path);
  } catch (...) {
    // Best effort: the error being thrown is the one worth reporting.
    ::unlink(temporary.c_str());
    throw;
  }
  fsync_directory(path);
}

std::size_t remove_abandoned_temporaries(const std::filesystem::path& directory) {
  std::size_t removed = 0;
  std::error_code ec;
  std::filesystem::directory_iterator entries{directory, ec};
  for (; !ec && entries != std::filesystem::directory_iterator{}; entries.increment(ec)) {
    const auto& path = entries->path();
    if (!is_atomic_write_temporary(path))
      continue;
    // O_NOFOLLOW: a link with a temporary's name is not a temporary. Open
    // for writing where allowed: NFS emulates flock with POSIX locks, whose
    // exclusive lock needs a descriptor open for writing.
    constexpr int flags = O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC;
    int fd = ::open(path.c_str(), O_RDWR | flags);
    if (fd == -1 && (errno == EACCES || errno == EROFS))
      fd = ::open(path.c_str(), O_RDONLY | flags);
    if (fd == -1)
      continue;
    file_descriptor file(fd);
    struct stat status {};
    if (::fstat(file.get(), &status) == -1 || !S_ISREG(status.st_mode))
      continue; // only regular files are temporaries
    // A live writer holds the lock: leave its temporary alone.
    if (flock_resuming(file.get(), LOCK_EX | LOCK_NB) == -1)
      continue;
    // Locked: its writer is gone, or it finished and renamed the file away
    // (then the name leads nowhere, or to another file, and stays).
    if (names_open_file(path, file.get()) && ::unlink(path.c_str()) == 0)
      ++removed;
  }
  return removed;
}

void set_atomic_write_hook(std::function<void(atomic_write_stage)> hook) {
  write_hook() = std::move(hook);
}

bool is_atomic_write_temporary(const std::filesystem::path& path) {
  // <filename>.tmp.<pid>.<counter>, read from the end.
  auto name = path.filename().string();
  std::string_view rest = name;
  auto counter_dot = rest.rfind('.');
  if (counter_dot == std::string_view::npos || !is_digits(rest.substr(counter_dot + 1)))
    return false;
  rest = rest.substr(0, counter_dot);
  auto pid_dot = rest.rfind('.');
  if (pid_dot == std::string_view::npos || !is_digits(rest.substr(pid_dot + 1)))
    return false;
  rest = rest.substr(0, pid_dot + 1); // keeps the dot: "<filename>.tmp."
  return rest.size() > temporary_infix.size() && rest.ends_with(temporary_infix);
}

} // namespace lockstep::detail

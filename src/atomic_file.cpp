#include "atomic_file.hpp"

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

// Owns a file descriptor. The destructor closes it only on error paths,
// unchecked, because a second failure would hide the first; `close()` is
// the checked close of the normal path.
class file_descriptor {
public:
  explicit file_descriptor(int fd) : fd_(fd) {
  }

  ~file_descriptor() {
    if (fd_ != -1)
      ::close(fd_);
  }

  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;

  int get() const { return fd_; }

  void close(const std::filesystem::path& path) {
    // Linux releases the descriptor even when close fails: never close twice.
    int fd = std::exchange(fd_, -1);
    LOCKSTEP_SYS_CHECK(::close(fd), path);
  }

private:
  int fd_;
};

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
  dir.close(directory);
}

bool is_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
}

} // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  auto temporary = temporary_path_for(path);
  file_descriptor file(LOCKSTEP_SYS_CHECK(
    ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), temporary));
  try {
    auto half = bytes.size() / 2;
    write_all(file, bytes.substr(0, half), temporary);
    run_hook(atomic_write_stage::partial_write);
    write_all(file, bytes.substr(half), temporary);
    LOCKSTEP_SYS_CHECK(::fsync(file.get()), temporary);
    file.close(temporary);
    run_hook(atomic_write_stage::before_rename);
    LOCKSTEP_SYS_CHECK(::rename(temporary.c_str(), path.c_str()), path);
  } catch (...) {
    // Best effort: the error being thrown is the one worth reporting.
    ::unlink(temporary.c_str());
    throw;
  }
  fsync_directory(path);
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

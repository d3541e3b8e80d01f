#pragma once

// Helpers for the tests of input files that are not regular files (a FIFO,
// a symbolic link to one, a character device, a socket, a directory), and
// a forked child that runs a read under an alarm, so a read that blocks
// fails the test instead of hanging it.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

/// One path that is not a regular file, and how lockstep describes it.
struct special_file {
  std::filesystem::path path;
  std::string type; // as detail::describe_file_type words it
};

/// A FIFO, a symbolic link to it, a bound AF_UNIX socket and a directory in
/// `directory`, and /dev/zero (a character device: an endless stream).
/// The socket stays bound while the object lives.
class special_files {
public:
  explicit special_files(const std::filesystem::path& directory) {
    const auto fifo = directory / "fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    files_.push_back({fifo, "a FIFO (named pipe)"});
    const auto link = directory / "link-to-fifo";
    std::filesystem::create_symlink(fifo, link);
    files_.push_back({link, "a FIFO (named pipe)"});
    files_.push_back({"/dev/zero", "a character device"});
    const auto socket_path = directory / "socket";
    socket_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(socket_ != -1);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    REQUIRE(socket_path.string().size() < sizeof address.sun_path);
    std::strcpy(address.sun_path, socket_path.c_str());
    REQUIRE(::bind(socket_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    files_.push_back({socket_path, "a socket"});
    const auto folder = directory / "folder";
    std::filesystem::create_directory(folder);
    files_.push_back({folder, "a directory"});
  }

  ~special_files() { ::close(socket_); }

  special_files(const special_files&) = delete;
  special_files& operator=(const special_files&) = delete;

  const std::vector<special_file>& all() const { return files_; }

private:
  std::vector<special_file> files_;
  int socket_ = -1;
};

/// How a bounded child ended and what it reported.
struct bounded_child_result {
  int status = 0;      // as waitpid reports it
  std::string report;  // what the child wrote to its pipe
};

/// True if the child exited normally with `code`.
inline bool exited_with(const bounded_child_result& result, int code) {
  return WIFEXITED(result.status) && WEXITSTATUS(result.status) == code;
}

/// How the child ended, in words, for failure messages.
inline std::string describe_end(const bounded_child_result& result) {
  if (WIFEXITED(result.status))
    return "exited with " + std::to_string(WEXITSTATUS(result.status)) + ": " + result.report;
  if (WIFSIGNALED(result.status) && WTERMSIG(result.status) == SIGALRM)
    return "was killed by its alarm: the call blocked";
  if (WIFSIGNALED(result.status))
    return "was killed by signal " + std::to_string(WTERMSIG(result.status));
  return "ended with status " + std::to_string(result.status);
}

/// Runs `action` (returning a std::string to report) in a forked child
/// that SIGALRM kills after `alarm_seconds`; the child writes the string
/// to a pipe and exits 0, or writes the message of what `action` threw
/// and exits 2. It never returns into doctest. Waits at most
/// `alarm_seconds` + 30 s for it (then kills it and fails the test).
template <class F>
bounded_child_result run_in_bounded_child(unsigned alarm_seconds, F&& action) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child != -1);
  if (child == 0) {
    ::close(fds[0]);
    ::alarm(alarm_seconds);
    int code = 0;
    std::string report;
    try {
      report = action();
    } catch (const std::exception& e) {
      report = e.what();
      code = 2;
    } catch (...) {
      report = "a non-standard exception";
      code = 2;
    }
    // A pipe holds 64 KiB: enough for one message, written before exiting.
    const auto written = ::write(fds[1], report.data(), report.size());
    ::_exit(written == static_cast<ssize_t>(report.size()) ? code : 4);
  }
  ::close(fds[1]);
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::seconds(alarm_seconds + 30);
  bounded_child_result result;
  for (;;) {
    const pid_t done = ::waitpid(child, &result.status, WNOHANG);
    if (done == child)
      break;
    if (done == -1 && errno != EINTR) {
      ::close(fds[0]);
      const std::string reason = std::strerror(errno);
      FAIL("waitpid failed: " << reason);
    }
    if (clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &result.status, 0);
      ::close(fds[0]);
      FAIL("the child process did not end within " << alarm_seconds + 30 << " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // The child has ended: its end of the pipe is closed, so reads reach EOF.
  char buffer[4096];
  for (;;) {
    const auto n = ::read(fds[0], buffer, sizeof buffer);
    if (n == -1 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    result.report.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  return result;
}

/// The message of the exception of type E that `action` throws, as a
/// report of run_in_bounded_child: "no exception" if none, and a child
/// exit code of 2 (with the message) if another type is thrown.
template <class E, class F>
std::string message_of(F&& action) {
  try {
    action();
  } catch (const E& e) {
    return e.what();
  }
  return "no exception";
}

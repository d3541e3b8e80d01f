#pragma once

// The fault proxy (tests/netns/fault_proxy.cpp) as a child of a test: its
// commands go down a pipe to its stdin, its answers and events come back
// in a file. Every wait has a limit, after which the test fails. Closing
// the pipe ends the proxy; the destructor does that, and kills it should it
// not end.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

class fault_proxy_process {
public:
  /// Starts `argv` (the proxy, or a command that runs it on a host) with
  /// its output in `output`, and waits until it listens.
  fault_proxy_process(const std::vector<std::string>& argv, std::filesystem::path output)
    : output_(std::move(output)) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int error = ::posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[0]);
    input_ = fds[1];
    REQUIRE_MESSAGE(error == 0, "cannot start " << argv[0] << ": " << std::strerror(error));
    wait_for_lines("ready", 1);
  }

  ~fault_proxy_process() {
    ::close(input_);
    if (pid_ < 0)
      return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  fault_proxy_process(const fault_proxy_process&) = delete;
  fault_proxy_process& operator=(const fault_proxy_process&) = delete;

  /// Sends `line` and waits until the proxy has applied it.
  void command(const std::string& line) {
    const auto answered = count_answers();
    const auto text = line + "\n";
    REQUIRE(::write(input_, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    wait_until([&] { return count_answers() > answered; }, "an answer to '" + line + "'");
    REQUIRE_MESSAGE(text_().find("error " + line) == std::string::npos,
                    "the proxy refused '" << line << "':\n" << text_());
  }

  /// Everything it printed.
  std::string text() const { return text_(); }

  /// How many lines it printed that start with `start`.
  std::size_t lines_starting(const std::string& start) const {
    std::istringstream in(text_());
    std::size_t count = 0;
    for (std::string line; std::getline(in, line);)
      count += line.starts_with(start) ? 1 : 0;
    return count;
  }

  /// How many lines it printed that start with `start`, after the first
  /// line that is `marker` (e.g. "ok stall").
  std::size_t lines_starting_after(const std::string& marker, const std::string& start) const {
    std::istringstream in(text_());
    std::size_t count = 0;
    bool after = false;
    for (std::string line; std::getline(in, line);) {
      count += after && line.starts_with(start) ? 1 : 0;
      after = after || line == marker;
    }
    return count;
  }

  /// Waits until it printed `count` lines that start with `start`.
  void wait_for_lines(const std::string& start, std::size_t count) {
    wait_until([&] { return lines_starting(start) >= count; },
               std::to_string(count) + " line(s) starting '" + start + "'");
  }

private:
  std::string text_() const {
    std::ifstream in(output_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::size_t count_answers() const { return lines_starting("ok ") + lines_starting("error "); }

  template <class Condition>
  void wait_until(Condition done, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL("the fault proxy ended while the test waited for " << what << ":\n" << text_());
      }
      if (std::chrono::steady_clock::now() > deadline)
        FAIL("the fault proxy did not print " << what << " within 20 s:\n" << text_());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::filesystem::path output_;
  pid_t pid_ = -1;
  int input_ = -1;
};

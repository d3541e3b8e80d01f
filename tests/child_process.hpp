#pragma once

// Runs a program as a child process for tests that need a process of their
// own (a thread limit, a command line, a crash): argv, extra environment,
// working directory, stdout and stderr to files, and a time limit after
// which the child is killed, so a hang fails the test instead of the suite.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

/// What to run and where its output goes.
struct child_command {
  /// The program (looked up on PATH when it has no slash) and its arguments.
  std::vector<std::string> argv;
  /// NAME=VALUE pairs that take precedence over this process's environment.
  std::vector<std::string> extra_env;
  /// Empty: this process's working directory.
  std::filesystem::path cwd;
  std::filesystem::path out;
  /// Empty: stderr goes to `out` as well.
  std::filesystem::path err;
  std::chrono::seconds limit{60};
};

/// How a child ended: its exit status, or -1 when a signal ended it or it
/// ran past the limit (`timed_out`) and was killed.
struct child_exit {
  int status = -1;
  bool timed_out = false;
};

/// Runs `command` with stdin from /dev/null and waits at most its limit.
inline child_exit run_child_process(const child_command& command) {
  std::vector<char*> argv;
  for (const auto& a : command.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> env;
  for (const auto& e : command.extra_env)
    env.push_back(const_cast<char*>(e.c_str()));
  for (char** e = environ; *e != nullptr; ++e)
    env.push_back(*e); // getenv takes the first of duplicates: extra_env wins
  env.push_back(nullptr);
  const auto& err = command.err.empty() ? command.out : command.err;

  posix_spawn_file_actions_t actions;
  REQUIRE(posix_spawn_file_actions_init(&actions) == 0);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, command.out.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (err == command.out)
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  else
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!command.cwd.empty())
    posix_spawn_file_actions_addchdir_np(&actions, command.cwd.c_str());
  pid_t pid = 0;
  const auto started = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE_MESSAGE(started == 0, "cannot start " << command.argv[0] << ": "
                                                << std::strerror(started));

  const auto deadline = std::chrono::steady_clock::now() + command.limit;
  child_exit result;
  int status = 0;
  for (;;) {
    const auto done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid)
      break;
    if (done < 0 && errno != EINTR)
      FAIL("waitpid: " << std::strerror(errno));
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      result.timed_out = true;
      return result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status))
    result.status = WEXITSTATUS(status);
  return result;
}

/// Whether process `pid` (not this one's child) has ended: gone, or a
/// zombie that its new parent has not reaped yet.
inline bool has_ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text))
    return true;
  const auto after_name = text.rfind(')');
  return after_name != std::string::npos && after_name + 2 < text.size()
         && text[after_name + 2] == 'Z';
}

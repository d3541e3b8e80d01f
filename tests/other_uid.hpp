#pragma once

// Runs a test's child program as an otherwise unused uid: the way to put a
// real per-user limit (RLIMIT_NPROC counts every process of the uid) on a
// child while tests run in parallel and as root. Such a child can run only
// where that uid may reach the program: a build under a directory other
// users cannot enter (a build under /root, mode 0700) cannot be run so, and
// a test skips, saying why, instead of failing.

#include <doctest/doctest.h>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "child_process.hpp"
#include "file_support.hpp"

/// A uid with no account and, for the test's purpose, no processes. Tests
/// running at the same time pass different `slot`s (0 to 7); processes of
/// other test binaries differ by their pid.
inline std::string unused_uid(int slot) {
  for (auto uid = 61000 + (::getpid() % 1000) * 8 + slot;; uid += 8000)
    if (::getpwuid(static_cast<uid_t>(uid)) == nullptr)
      return std::to_string(uid);
}

/// The command prefix that runs what follows as `uid` (its group the same
/// number, no supplementary groups) under a limit of `nproc` processes and
/// threads. setpriv keeps root's capabilities up to its own exec, so a
/// program it starts directly is found even where the uid may not look;
/// prlimit, started by setpriv, starts the program with the uid's rights.
inline std::vector<std::string> as_uid_limited(const std::string& uid, int nproc) {
  return {"setpriv", "--reuid=" + uid, "--regid=" + uid, "--clear-groups",
          "prlimit", "--nproc=" + std::to_string(nproc), "--"};
}

/// The nearest directory above `path` that users other than its owner (and
/// group) cannot enter, or empty when there is none: where a build lies
/// under /root, "/root (mode 0700)". Only a hint for a message: ACLs and
/// mount options can refuse as well.
inline std::string closed_directory_above(const std::filesystem::path& path) {
  std::error_code error;
  auto directory = std::filesystem::weakly_canonical(path, error).parent_path();
  if (error)
    directory = path.parent_path();
  for (;; directory = directory.parent_path()) {
    struct stat st {};
    if (::stat(directory.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return directory.string() + " (mode " + mode + ")";
    }
    if (directory == directory.root_path() || directory.empty())
      return {};
  }
}

/// Why `probe` (a program and arguments that end at once with exit status
/// `expected`, e.g. a usage error) cannot be run through as_uid_limited
/// here, or empty when it can: this process is not root, or the uid cannot
/// start the program or load its libraries.
inline std::string other_uid_unusable(const std::vector<std::string>& probe, int expected) {
  if (::geteuid() != 0)
    return "not root: the test needs to run its child as another uid";
  const auto uid = unused_uid(7);
  // The way the tests start their children, with room for any probe.
  auto argv = as_uid_limited(uid, 64);
  argv.insert(argv.end(), probe.begin(), probe.end());
  temporary_directory dir{"other_uid"};
  const auto output = dir.path() / "output";
  const auto exit = run_child_process(
    {.argv = argv, .extra_env = {}, .cwd = {}, .out = output, .err = {},
     .limit = std::chrono::seconds{30}});
  if (exit.status == expected)
    return {};
  auto said = read_file(output);
  if (const auto end = said.find('\n'); end != std::string::npos)
    said.resize(end);
  std::string reason = "uid " + uid + " (no account) cannot run " + probe.front() + ": ";
  reason += exit.timed_out ? std::string("it did not end within 30 s")
                           : "exit status " + std::to_string(exit.status) + " where "
                               + std::to_string(expected) + " was expected (\"" + said + "\")";
  const auto closed = closed_directory_above(probe.front());
  if (!closed.empty())
    reason += "; other users cannot enter " + closed
              + ": build under a directory they can enter to run this test";
  return reason;
}

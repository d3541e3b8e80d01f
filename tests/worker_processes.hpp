#pragma once

// Worker processes for the multi-process tests (multi_worker_test,
// launchers_test): several children running at once, each with an
// environment of its own and its stdout and stderr in one file; free ports
// for them; a folder that goes away with the test. Every wait has a limit,
// after which the children still running are killed and the test fails.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

/// The program that meson names in `variable`.
inline std::string test_program(const char* variable) {
  const char* path = std::getenv(variable);
  REQUIRE_MESSAGE(path != nullptr, variable << " is not set (run the test through meson)");
  return path;
}

/// The path of program `name` on PATH, or nothing.
inline std::optional<std::string> on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string folders = path != nullptr ? path : "";
  std::size_t start = 0;
  while (start <= folders.size()) {
    const auto end = std::min(folders.find(':', start), folders.size());
    const auto candidate = std::filesystem::path(folders.substr(start, end - start)) / name;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0)
      return candidate.string();
    start = end + 1;
  }
  return std::nullopt;
}

/// The first of `count` consecutive TCP ports that are free on every
/// address now. They lie below the kernel's ephemeral range, so no
/// connection of this host is given one of them in the meantime; a port
/// chosen at random makes two tests running at once unlikely to meet.
inline int free_ports(int count) {
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  const int low = 10000;
  const int high = ephemeral_low - count; // the last base to try
  REQUIRE(high > low);
  const auto bindable = [](int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    return ok;
  };
  std::mt19937 random(std::random_device{}());
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int base = std::uniform_int_distribution<int>(low, high)(random);
    int free = 0;
    while (free < count && bindable(base + free))
      ++free;
    if (free == count)
      return base;
  }
  FAIL("no " << count << " free consecutive ports from " << low << " to " << ephemeral_low);
  return 0;
}

/// This process's environment without the cluster variables of any
/// launcher (the suite may itself run under one), plus `extra`.
inline std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  static const char* const launcher_prefixes[] = {
    "TF_CONFIG=", "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "GROUP_RANK=",
    "GROUP_WORLD_SIZE=", "ROLE_", "MASTER_ADDR=", "MASTER_PORT=", "TORCHELASTIC_", "PET_",
    "OMPI_", "PMIX_", "SLURM_"};
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool cluster = entry.starts_with("LOCKSTEP_") && !entry.starts_with("LOCKSTEP_LOG=");
    for (const auto* prefix : launcher_prefixes)
      cluster = cluster || entry.starts_with(prefix);
    if (!cluster)
      out.push_back(entry);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

/// TF_CONFIG for process `i` of `count` workers that listen on loopback
/// at consecutive ports from `base`, as "TF_CONFIG=<json>". `with_chief`:
/// process 0 is the chief and process i worker i - 1; else process i is
/// worker i.
inline std::string tf_config(int base, std::size_t count, std::size_t i,
                             bool with_chief = false) {
  const auto address = [&](std::size_t k) {
    return "\"127.0.0.1:" + std::to_string(base + static_cast<int>(k)) + "\"";
  };
  std::string workers;
  for (std::size_t k = with_chief ? 1 : 0; k < count; ++k)
    workers += (workers.empty() ? "" : ",") + address(k);
  const auto jobs = with_chief ? "\"chief\":[" + address(0) + "],\"worker\":[" + workers + "]"
                               : "\"worker\":[" + workers + "]";
  const bool chief = with_chief && i == 0;
  const auto index = with_chief && !chief ? i - 1 : i;
  return "TF_CONFIG={\"cluster\":{" + jobs + "},\"task\":{\"type\":\""
         + (chief ? "chief" : "worker") + "\",\"index\":" + std::to_string(index) + "}}";
}

/// A started child: its pid, the file of its output, and once it ended,
/// its wait status.
struct process {
  pid_t pid = -1;
  std::filesystem::path output; // stdout and stderr together
  std::optional<int> status;

  std::string text() const {
    std::ifstream in(output);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string how() const {
    if (!status)
      return "still running";
    if (WIFEXITED(*status))
      return "exit status " + std::to_string(WEXITSTATUS(*status));
    return "signal " + std::to_string(WTERMSIG(*status));
  }
  bool exited_with(int code) const {
    return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
  }
  bool exited_ok() const { return exited_with(0); }
};

/// Starts `argv` (argv[0] a path) with exactly `environment`, stdin closed
/// and its output to `output`.
inline process spawn(const std::vector<std::string>& argv,
                     const std::vector<std::string>& environment,
                     const std::filesystem::path& output) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args, env;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : environment)
    env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  process p;
  p.output = output;
  // Found on PATH, as run_child_process finds its programs (setpriv).
  const int error = ::posix_spawnp(&p.pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE_MESSAGE(error == 0,
                  "cannot start " << argv[0] << ": " << std::string(std::strerror(error)));
  return p;
}

/// Waits for every process until `limit` has passed; then kills those
/// left, which fails the test.
inline void wait_all(std::vector<process>& processes, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool running = false;
    for (auto& p : processes) {
      int status = 0;
      if (!p.status && ::waitpid(p.pid, &status, WNOHANG) == p.pid)
        p.status = status;
      running = running || !p.status;
    }
    if (!running)
      return;
    if (std::chrono::steady_clock::now() > deadline) {
      for (auto& p : processes)
        if (!p.status) {
          ::kill(p.pid, SIGKILL);
          int status = 0;
          ::waitpid(p.pid, &status, 0);
          p.status = status;
          FAIL_CHECK("a worker still ran after " << limit.count() << " s; its output:\n"
                                                 << p.text());
        }
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

/// Every process ended with status 0 and printed `expect`.
inline void require_all_ok(const std::vector<process>& processes, const std::string& expect) {
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const auto text = processes[i].text();
    CHECK_MESSAGE(processes[i].exited_ok(), "worker " << i << " failed (" << processes[i].how()
                                                      << "):\n" << text);
    CHECK_MESSAGE(text.find(expect) != std::string::npos,
                  "worker " << i << " did not print '" << expect << "':\n" << text);
  }
}

/// A fresh folder under the temporary directory, removed with its files.
class temp_folder {
public:
  temp_folder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "lockstep-mw-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~temp_folder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  temp_folder(const temp_folder&) = delete;
  temp_folder& operator=(const temp_folder&) = delete;

  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
};

#pragma once

// A small network on this machine for the netns suite: each host is a
// network namespace of its own with its own address (host i at
// 10.77.0.<i+1>/24 on its eth0), and the hosts meet through veth pairs on a
// bridge that lives in a namespace of its own (the switch), so traffic
// between hosts crosses a real network stack and nothing is added to the
// machine's own namespace. Each host may have a hosts file of its own
// (/etc/netns/<namespace>/hosts, which `ip netns exec` puts in place of
// /etc/hosts): a test points a worker's name at the fault proxy's host
// there, as a service name points at a proxy in a cluster.
//
// Every name starts with a prefix unique to the lab (lsn<pid>-<n>-), so
// parallel runs never meet. The destructor kills what still runs in the
// lab's namespaces and removes them with their veths, the bridge and the
// hosts files, also when the test fails; the constructor first removes
// leftovers of the same prefix and of runs whose process is gone.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

/// How a command ended, and what it printed (stdout and stderr together).
struct command_result {
  int status = -1; // the exit status; -1 when it could not run or a signal ended it
  std::string output;
};

/// Runs `argv` (looked up on PATH) to its end, its output captured.
inline command_result run_command(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return {-1, std::string("pipe: ") + std::strerror(errno)};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int error = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  command_result result;
  if (error != 0) {
    ::close(pipe_fds[0]);
    result.output = "cannot run " + argv[0] + ": " + std::strerror(error);
    return result;
  }
  char buffer[4096];
  for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      break;
    result.output.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status))
    result.status = WEXITSTATUS(status);
  return result;
}

/// `argv` as one line, for messages.
inline std::string command_text(const std::vector<std::string>& argv) {
  std::string text;
  for (const auto& a : argv)
    text += (text.empty() ? "" : " ") + a;
  return text;
}

/// Why this process cannot build a lab (not root, no `ip`, namespaces not
/// allowed, /etc/netns not writable), or empty when it can: the suite's
/// tests exit 77 (skipped) with that reason.
std::string network_lab_unavailable();

class network_lab {
public:
  /// `hosts` hosts on one bridge. Fails the test (after removing what it
  /// made) when a step fails.
  explicit network_lab(std::size_t hosts);
  ~network_lab();

  network_lab(const network_lab&) = delete;
  network_lab& operator=(const network_lab&) = delete;

  std::size_t hosts() const { return hosts_; }
  /// Host i's address: 10.77.0.<i+1>.
  static std::string address(std::size_t host) { return "10.77.0." + std::to_string(host + 1); }
  /// Host i's network namespace.
  std::string namespace_of(std::size_t host) const { return prefix_ + "h" + std::to_string(host); }
  /// Makes host i see `entries` (name, address) in its /etc/hosts, beside
  /// localhost; applies to programs started on it afterwards.
  void set_hosts_file(std::size_t host,
                      const std::vector<std::pair<std::string, std::string>>& entries) const;
  /// The command line that runs `argv` on host i.
  std::vector<std::string> on_host(std::size_t host, const std::vector<std::string>& argv) const;

  /// Kills what runs in namespace `name`, deletes it and its hosts file.
  static void remove_namespace(const std::string& name);

private:
  void remove_all() const;

  std::string prefix_;
  std::size_t hosts_;
};

// -- implementation (header-only: each test binary includes it once) ------------

inline std::string network_lab_unavailable() {
  if (::geteuid() != 0)
    return "network namespaces need root (this test runs as uid " + std::to_string(::geteuid())
           + ")";
  const auto version = run_command({"ip", "-V"});
  if (version.status != 0)
    return "the ip command (iproute2) is not available: " + version.output;
  const std::string probe = "lsn" + std::to_string(::getpid()) + "-probe";
  const auto added = run_command({"ip", "netns", "add", probe});
  if (added.status != 0)
    return "cannot create a network namespace (ip netns add): " + added.output;
  std::string why;
  const auto folder = std::filesystem::path("/etc/netns") / probe;
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error)
    why = "cannot write hosts files under /etc/netns: " + error.message();
  // ip netns exec makes a mount namespace and mounts the hosts file and /sys.
  const auto exec = run_command({"ip", "netns", "exec", probe, "true"});
  if (why.empty() && exec.status != 0)
    why = "cannot run a program in a network namespace (ip netns exec): " + exec.output;
  const auto bridge = run_command({"ip", "-n", probe, "link", "add", "name", "br0", "type",
                                   "bridge"});
  if (why.empty() && bridge.status != 0)
    why = "cannot create a bridge in a network namespace: " + bridge.output;
  const auto veth = run_command({"ip", "-n", probe, "link", "add", "name", "v0", "type", "veth",
                                 "peer", "name", "v1"});
  if (why.empty() && veth.status != 0)
    why = "cannot create a veth pair in a network namespace: " + veth.output;
  network_lab::remove_namespace(probe);
  return why;
}

inline void network_lab::remove_namespace(const std::string& name) {
  // Processes keep a deleted namespace alive: end them first. The lab's
  // own are this process's children, reaped here.
  const auto pids = run_command({"ip", "netns", "pids", name});
  std::istringstream in(pids.output);
  for (pid_t pid; in >> pid;) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0); // not a child: returns at once (ECHILD)
  }
  run_command({"ip", "netns", "delete", name});
  std::error_code ignored;
  std::filesystem::remove_all(std::filesystem::path("/etc/netns") / name, ignored);
}

inline network_lab::network_lab(std::size_t hosts) : hosts_(hosts) {
  static int count = 0;
  prefix_ = "lsn" + std::to_string(::getpid()) + "-" + std::to_string(++count) + "-";
  // Leftovers: this prefix's, and those of runs whose process is gone (a
  // namespace, or a hosts file whose namespace went first).
  const auto leftover = [&](const std::string& name) {
    if (!name.starts_with("lsn"))
      return false;
    const auto pid = std::atoi(name.c_str() + 3);
    return name.starts_with(prefix_) || (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH);
  };
  const auto list = run_command({"ip", "netns", "list"});
  std::istringstream lines(list.output);
  for (std::string line; std::getline(lines, line);)
    if (const auto name = line.substr(0, line.find(' ')); leftover(name))
      remove_namespace(name);
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/etc/netns", ignored))
    if (leftover(entry.path().filename().string()))
      std::filesystem::remove_all(entry.path(), ignored);
  const auto sw = prefix_ + "sw";
  std::vector<std::vector<std::string>> steps{
    {"ip", "netns", "add", sw},
    {"ip", "-n", sw, "link", "add", "name", "br0", "type", "bridge"},
    {"ip", "-n", sw, "link", "set", "br0", "up"}};
  for (std::size_t i = 0; i < hosts; ++i) {
    const auto host = namespace_of(i);
    const auto port = "h" + std::to_string(i); // the switch's end
    steps.push_back({"ip", "netns", "add", host});
    steps.push_back({"ip", "-n", sw, "link", "add", "name", port, "type", "veth", "peer", "name",
                     "eth0", "netns", host});
    steps.push_back({"ip", "-n", sw, "link", "set", port, "master", "br0"});
    steps.push_back({"ip", "-n", sw, "link", "set", port, "up"});
    steps.push_back({"ip", "-n", host, "addr", "add", address(i) + "/24", "dev", "eth0"});
    steps.push_back({"ip", "-n", host, "link", "set", "eth0", "up"});
    steps.push_back({"ip", "-n", host, "link", "set", "lo", "up"});
  }
  for (const auto& step : steps) {
    const auto result = run_command(step);
    if (result.status != 0) {
      remove_all();
      FAIL("building the network: `" << command_text(step) << "` failed: " << result.output);
    }
  }
}

inline network_lab::~network_lab() { remove_all(); }

inline void network_lab::remove_all() const {
  for (std::size_t i = 0; i < hosts_; ++i)
    remove_namespace(namespace_of(i));
  remove_namespace(prefix_ + "sw");
}

inline void network_lab::set_hosts_file(
  std::size_t host, const std::vector<std::pair<std::string, std::string>>& entries) const {
  const auto folder = std::filesystem::path("/etc/netns") / namespace_of(host);
  std::filesystem::create_directories(folder);
  std::ofstream out(folder / "hosts", std::ios::trunc);
  out << "127.0.0.1 localhost\n";
  for (const auto& [name, address] : entries)
    out << address << " " << name << "\n";
  out.close();
  REQUIRE_MESSAGE(out, "cannot write " << (folder / "hosts").string());
}

inline std::vector<std::string> network_lab::on_host(std::size_t host,
                                                     const std::vector<std::string>& argv) const {
  std::vector<std::string> command{"ip", "netns", "exec", namespace_of(host)};
  command.insert(command.end(), argv.begin(), argv.end());
  return command;
}

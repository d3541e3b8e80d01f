// multi_worker_mirrored_strategy across real processes on loopback: this
// test starts tests/multi_worker_worker several times, each with TF_CONFIG
// naming the same cluster and the same token, and checks what each did
// (its exit status and output). Then lockstep-run, which does the same for
// users. MULTI_WORKER_PROGRAM and LOCKSTEP_RUN (set by meson) name the two
// programs.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string program(const char* variable) {
  const char* path = std::getenv(variable);
  REQUIRE_MESSAGE(path != nullptr, variable << " is not set (run the test through meson)");
  return path;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

/// This process's environment without the cluster variables of any
/// launcher, plus `extra`.
std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const bool cluster = entry.starts_with("TF_CONFIG=")
                         || (entry.starts_with("LOCKSTEP_") && !entry.starts_with("LOCKSTEP_LOG="))
                         || entry.starts_with("RANK=") || entry.starts_with("WORLD_SIZE=")
                         || entry.starts_with("OMPI_COMM_WORLD") || entry.starts_with("SLURM_");
    if (!cluster)
      out.push_back(entry);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

struct process {
  pid_t pid = -1;
  fs::path output; // stdout and stderr together
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
  bool exited_ok() const { return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0; }
};

process spawn(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
              const fs::path& output) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
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
  const int error = ::posix_spawn(&p.pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE_MESSAGE(error == 0, "cannot start " << argv[0] << ": " << std::strerror(error));
  return p;
}

/// Waits for every process until `deadline`; then kills those left, which
/// fails the test.
void wait_all(std::vector<process>& processes, std::chrono::seconds limit) {
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
    std::this_thread::sleep_for(10ms);
  }
}

class temp_folder {
public:
  temp_folder() {
    std::string pattern = (fs::temp_directory_path() / "lockstep-mw-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~temp_folder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

private:
  fs::path path_;
};

/// `replicas[i]` replicas on worker i, each running the worker program with
/// `args`; the workers, started.
std::vector<process> start_cluster(const temp_folder& folder, const std::vector<int>& replicas,
                                   const std::vector<std::string>& args,
                                   const std::vector<std::string>& last_worker_environment = {}) {
  std::string workers;
  for (std::size_t i = 0; i < replicas.size(); ++i)
    workers += (i == 0 ? "\"127.0.0.1:" : ",\"127.0.0.1:") + std::to_string(free_port()) + "\"";
  std::vector<process> processes;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    std::vector<std::string> argv{program("MULTI_WORKER_PROGRAM")};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto config = "TF_CONFIG={\"cluster\":{\"worker\":[" + workers
                        + "]},\"task\":{\"type\":\"worker\",\"index\":" + std::to_string(i) + "}}";
    std::vector<std::string> environment{config,
                                         "LOCKSTEP_CLUSTER_TOKEN=multi-worker-test-token-0123",
                                         "LOCKSTEP_JOB_ID=multi-worker-test",
                                         "LOCKSTEP_REPLICAS_PER_WORKER="
                                           + std::to_string(replicas[i])};
    if (i + 1 == replicas.size())
      environment.insert(environment.end(), last_worker_environment.begin(),
                         last_worker_environment.end());
    processes.push_back(spawn(argv, environment_with(environment),
                              folder.path() / ("worker" + std::to_string(i) + ".txt")));
  }
  return processes;
}

void require_all_ok(const std::vector<process>& processes, const std::string& expect) {
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const auto text = processes[i].text();
    CHECK_MESSAGE(processes[i].exited_ok(), "worker " << i << " failed (" << processes[i].how()
                                                      << "):\n" << text);
    CHECK_MESSAGE(text.find(expect) != std::string::npos,
                  "worker " << i << " did not print '" << expect << "':\n" << text);
  }
}

/// The last worker of `processes` was killed or froze itself: the others
/// must end well, having printed "ok lost"; it is reaped (killed first if
/// frozen) and must have ended by a signal.
void check_survivors_and_victim(std::vector<process>& processes) {
  auto survivors = std::vector<process>(processes.begin(), processes.end() - 1);
  wait_all(survivors, 60s);
  require_all_ok(survivors, "ok lost");
  auto& last = processes.back();
  ::kill(last.pid, SIGKILL); // frozen, or dead already
  int status = 0;
  ::waitpid(last.pid, &status, 0);
  CHECK_MESSAGE(WIFSIGNALED(status), last.text());
}

} // namespace

TEST_CASE("every op, dtype and size, 1 to 4 workers x 1 and 2 replicas, against closed forms") {
  for (const int workers : {1, 2, 3, 4})
    for (const int local : {1, 2}) {
      CAPTURE(workers);
      CAPTURE(local);
      temp_folder folder;
      auto processes = start_cluster(folder, std::vector<int>(workers, local), {"collectives"});
      wait_all(processes, 120s);
      require_all_ok(processes, "ok collectives: " + std::to_string(workers) + " workers x "
                                  + std::to_string(local) + " replicas");
    }
}

TEST_CASE("workers that issue different collectives all get an error naming them, then go on") {
  for (const int local : {1, 2}) {
    CAPTURE(local);
    temp_folder folder;
    auto processes = start_cluster(folder, {local, local, local}, {"mismatch"});
    wait_all(processes, 60s);
    require_all_ok(processes, "ok mismatch");
    // The same words on every worker, for each of the three mismatches.
    const auto errors = [](const std::string& text) {
      std::vector<std::string> lines;
      for (auto at = text.find("mismatch error: "); at != std::string::npos;
           at = text.find("mismatch error: ", at + 1))
        lines.push_back(text.substr(at, text.find('\n', at) - at));
      return lines;
    };
    const auto first = errors(processes[0].text());
    CHECK(first.size() == 3);
    for (const auto& p : processes)
      CHECK(errors(p.text()) == first);
  }
}

TEST_CASE("a worker killed or frozen before a collective: every survivor raises peer_lost_error") {
  for (const std::string how : {"kill", "stop"}) {
    CAPTURE(how);
    temp_folder folder;
    auto processes = start_cluster(folder, {1, 1, 1}, {"lost", how});
    check_survivors_and_victim(processes);
  }
}

TEST_CASE("a worker killed or frozen inside an all-reduce, at each phase: every survivor raises "
          "peer_lost_error") {
  // LOCKSTEP_FAULT counts arrivals (runtime/fault_injection.hpp): the
  // first all-reduce, of one element, passes the ring's agreement and an
  // all-gather too, so the second all-reduce's are the second arrivals.
  for (const std::string phase : {"agree", "reduce-scatter", "all-gather", "fan-out"})
    for (const std::string how : {"kill", "stop"}) {
      CAPTURE(phase);
      CAPTURE(how);
      temp_folder folder;
      const auto fault = "LOCKSTEP_FAULT=" + phase + ":" + how
                         + (phase == "agree" || phase == "all-gather" ? ":2" : "");
      auto processes = start_cluster(folder, {2, 2, 2}, {"lost", how, phase}, {fault});
      check_survivors_and_victim(processes);
      CHECK(processes.back().text().find("LOCKSTEP_FAULT: "
                                         + std::string(how == "kill" ? "killed" : "stopped")
                                         + " at " + phase)
            != std::string::npos);
    }
}

TEST_CASE("a worker with another replica count is refused naming the field") {
  temp_folder folder;
  auto processes = start_cluster(folder, {1, 2}, {"refused"});
  wait_all(processes, 60s);
  require_all_ok(processes, "");
  CHECK(processes[0].text().find("join timed out") != std::string::npos);
  CHECK(processes[1].text().find("refused: worker 1: 2 local replicas") != std::string::npos);
}

TEST_CASE("lockstep-run: starts the workers, prefixes their lines, passes a failure on") {
  temp_folder folder;
  const auto run = program("LOCKSTEP_RUN");
  const auto worker = program("MULTI_WORKER_PROGRAM");
  auto good = std::vector<process>{spawn({run, "-n", "2", "--replicas-per-worker", "2", worker,
                                          "collectives"},
                                         environment_with({}), folder.path() / "good.txt")};
  wait_all(good, 120s);
  const auto text = good[0].text();
  CHECK_MESSAGE(good[0].exited_ok(), text);
  CHECK(text.find("[0] ok collectives: 2 workers x 2 replicas") != std::string::npos);
  CHECK(text.find("[1] ok collectives: 2 workers x 2 replicas") != std::string::npos);

  // Worker 1 kills itself: lockstep-run stops worker 0 and exits 128 + 9.
  auto bad = std::vector<process>{spawn({run, "-n", "2", worker, "lost", "kill"},
                                        environment_with({}), folder.path() / "bad.txt")};
  wait_all(bad, 60s);
  REQUIRE(bad[0].status);
  CHECK_MESSAGE((WIFEXITED(*bad[0].status) && WEXITSTATUS(*bad[0].status) == 128 + SIGKILL),
                bad[0].text());
  CHECK(bad[0].text().find("worker 1 failed (signal 9); stopping the others") != std::string::npos);

  auto usage = std::vector<process>{spawn({run, "-n", "zero", worker}, environment_with({}),
                                          folder.path() / "usage.txt")};
  wait_all(usage, 10s);
  CHECK(!usage[0].exited_ok());
  CHECK(usage[0].text().find("-n wants a whole number") != std::string::npos);
}

// multi_worker_mirrored_strategy across real processes on loopback: this
// test starts tests/multi_worker_worker several times, each with TF_CONFIG
// naming the same cluster and the same token, and checks what each did
// (its exit status and output). Then lockstep-run, which does the same for
// users. MULTI_WORKER_PROGRAM and LOCKSTEP_RUN (set by meson) name the two
// programs.

#include "worker_processes.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

/// `replicas[i]` replicas on worker i, each running the worker program with
/// `args`; the workers, started.
std::vector<process> start_cluster(const temp_folder& folder, const std::vector<int>& replicas,
                                   const std::vector<std::string>& args,
                                   const std::vector<std::string>& last_worker_environment = {}) {
  const auto base = free_ports(static_cast<int>(replicas.size()));
  std::string workers;
  for (std::size_t i = 0; i < replicas.size(); ++i)
    workers += (i == 0 ? "\"127.0.0.1:" : ",\"127.0.0.1:") + std::to_string(base + i) + "\"";
  std::vector<process> processes;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    std::vector<std::string> argv{test_program("MULTI_WORKER_PROGRAM")};
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
  temp_folder folder;
  auto processes = start_cluster(folder, {1, 1, 1}, {"mismatch"});
  wait_all(processes, 60s);
  require_all_ok(processes, "ok mismatch");
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
  const auto run = test_program("LOCKSTEP_RUN");
  const auto worker = test_program("MULTI_WORKER_PROGRAM");
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

// multi_worker_mirrored_strategy across real processes on loopback: this
// test starts tests/multi_worker_worker several times, each with TF_CONFIG
// naming the same cluster and the same token, and checks what each did
// (its exit status and output). Then lockstep-run, which does the same for
// users. MULTI_WORKER_PROGRAM and LOCKSTEP_RUN (set by meson) name the two
// programs.

#include "timeline_support.hpp"
#include "worker_processes.hpp"

#include "lockstep/error.hpp"
#include "lockstep/multi_worker_mirrored_strategy.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

/// `replicas[i]` replicas on worker i, each running the worker program with
/// `args`, the last with `last_worker_environment` and the others with
/// `others_environment` added; the workers, started. `with_chief`: process 0
/// is TF_CONFIG's chief and process i worker i - 1. `transport`:
/// LOCKSTEP_TRANSPORT, "tcp" (the ring, which the fault points and texts of
/// most cases here are about) unless a case asks for "auto" (shared memory:
/// the workers all run on this host). `launcher(i)`: a command worker i's
/// program runs under (its arguments, the program's path appended).
std::vector<process> start_cluster(const temp_folder& folder, const std::vector<int>& replicas,
                                   const std::vector<std::string>& args,
                                   const std::vector<std::string>& last_worker_environment = {},
                                   const std::vector<std::string>& others_environment = {},
                                   bool with_chief = false,
                                   const std::string& transport = "tcp",
                                   const std::function<std::vector<std::string>(std::size_t)>&
                                     launcher = {}) {
  const auto base = free_ports(static_cast<int>(replicas.size()));
  std::vector<process> processes;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    auto argv = launcher ? launcher(i) : std::vector<std::string>{};
    argv.push_back(test_program("MULTI_WORKER_PROGRAM"));
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> environment{tf_config(base, replicas.size(), i, with_chief),
                                         "LOCKSTEP_CLUSTER_TOKEN=multi-worker-test-token-0123",
                                         "LOCKSTEP_JOB_ID=multi-worker-test",
                                         "LOCKSTEP_TRANSPORT=" + transport,
                                         "LOCKSTEP_REPLICAS_PER_WORKER="
                                           + std::to_string(replicas[i])};
    const auto& added = i + 1 == replicas.size() ? last_worker_environment : others_environment;
    environment.insert(environment.end(), added.begin(), added.end());
    processes.push_back(spawn(argv, environment_with(environment),
                              folder.path() / ("worker" + std::to_string(i) + ".txt")));
  }
  return processes;
}

/// The last worker of `processes` was killed or froze itself: the others
/// must end well, having printed `expect` and `also`; it is reaped (killed
/// first if frozen) and must have ended by a signal.
void check_survivors_and_victim(std::vector<process>& processes,
                                const std::string& expect = "ok lost",
                                const std::string& also = "") {
  auto survivors = std::vector<process>(processes.begin(), processes.end() - 1);
  wait_all(survivors, 60s);
  require_all_ok(survivors, expect);
  require_all_ok(survivors, also);
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

TEST_CASE("workers of one host reduce through shared memory: every op, dtype and size, the "
          "same errors for different collectives, a lost worker, a timeout naming who did not "
          "come") {
  for (const int workers : {2, 3})
    for (const int local : {1, 2}) {
      CAPTURE(workers);
      CAPTURE(local);
      temp_folder folder;
      auto processes = start_cluster(folder, std::vector<int>(workers, local), {"collectives"},
                                     {}, {}, false, "auto");
      wait_all(processes, 120s);
      require_all_ok(processes, "ok collectives: " + std::to_string(workers) + " workers x "
                                  + std::to_string(local) + " replicas");
    }
  {
    temp_folder folder;
    auto processes = start_cluster(folder, {2, 2, 2}, {"mismatch"}, {}, {}, false, "auto");
    wait_all(processes, 120s);
    require_all_ok(processes, "ok mismatch");
  }
  for (const std::string how : {"kill", "stop"}) {
    CAPTURE(how);
    temp_folder folder;
    auto processes = start_cluster(folder, {1, 1, 1}, {"lost", how}, {}, {}, false, "auto");
    check_survivors_and_victim(processes);
    // Killed or not, no worker left a segment of this job in /dev/shm.
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
      CHECK_MESSAGE(!entry.path().filename().string().starts_with("lockstep-multi-worker-tes"),
                    entry.path());
  }
  {
    temp_folder folder;
    auto processes = start_cluster(folder, {2, 2, 2}, {"skipped", "0"}, {}, {}, false, "auto");
    wait_all(processes, 60s);
    require_all_ok(processes, "ok skipped");
  }
}

TEST_CASE("shared memory is probed, not assumed: workers of one host whose /dev/shm are their "
          "own keep to the ring") {
  // Each worker in a mount namespace of its own with a fresh /dev/shm (as
  // in containers of one machine): same host, same name, no shared memory.
  const auto private_shm = [](std::size_t) {
    return std::vector<std::string>{
      "unshare", "--mount", "--propagation", "private", "sh", "-c",
      "mount -t tmpfs -o size=16m tmpfs /dev/shm && exec \"$0\" \"$@\""};
  };
  if (::geteuid() != 0
      || std::system("unshare --mount --propagation private true >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: needs root and unshare(1) to give each worker a /dev/shm of its own");
    return;
  }
  for (const bool shared : {true, false}) {
    CAPTURE(shared);
    temp_folder folder;
    auto processes = start_cluster(folder, {2, 2}, {"collectives"}, {"LOCKSTEP_LOG=info"},
                                   {"LOCKSTEP_LOG=info"}, false, "auto",
                                   shared ? nullptr : std::function(private_shm));
    wait_all(processes, 120s);
    require_all_ok(processes, "ok collectives: 2 workers x 2 replicas");
    require_all_ok(processes, "mesh: the 2 workers connected (1 connection each)");
    require_all_ok(processes, shared ? "shared memory: the 2 workers share this host's memory"
                                     : "shared memory: no two workers share memory; the ring "
                                       "carries the collectives");
  }
}

TEST_CASE("workers on several hosts: each host's workers reduce through its memory, and a ring "
          "of one leader per host carries the rest") {
  if (::geteuid() != 0
      || std::system("unshare --mount --propagation private true >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: needs root and unshare(1) to give each host a /dev/shm of its own");
    return;
  }
  // Host h's /dev/shm: a folder of this machine's, bound over /dev/shm in
  // each of its workers' mount namespaces, so its workers share memory
  // with each other and not with the other hosts' workers.
  const auto host_folder = [](std::size_t h) {
    return std::filesystem::path("/dev/shm")
           / ("lockstep-hosts-test-" + std::to_string(::getpid()) + "-" + std::to_string(h));
  };
  const auto on_hosts = [&](std::vector<std::size_t> host_of) {
    return [=](std::size_t worker) {
      return std::vector<std::string>{
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        "mount --bind " + host_folder(host_of.at(worker)).string()
          + " /dev/shm && exec \"$0\" \"$@\""};
    };
  };
  for (std::size_t h = 0; h < 2; ++h)
    std::filesystem::create_directories(host_folder(h));
  struct layout {
    std::vector<std::size_t> host_of; // by worker
    int replicas;
    std::vector<std::string> scenario;
    std::string expect;
    std::string hosts; // as the log gives them
  };
  const std::vector<layout> layouts{
    // Hosts of different sizes whose ranks are not consecutive.
    {{0, 1, 1, 0, 1}, 1, {"collectives"}, "ok collectives: 5 workers x 1 replicas", "0, 3 | 1, 2, 4"},
    // A worker alone on its host leads it; the odd worker of the mismatch
    // shares host 0 with worker 0.
    {{0, 0, 1}, 2, {"collectives"}, "ok collectives: 3 workers x 2 replicas", "0, 1 | 2"},
    {{0, 0, 1}, 2, {"mismatch"}, "ok mismatch", "0, 1 | 2"},
    // Only one worker issues the second all-reduce: every worker's timeout
    // names it as the program numbers it and every worker that did not
    // come, on the other host too (a host's group asks the node).
    {{0, 0, 1}, 2, {"skipped", "0"}, "ok skipped", "0, 1 | 2"},
    {{0, 0, 1}, 2, {"skipped", "2"}, "ok skipped", "0, 1 | 2"},
    // The worker killed is a host's second worker, then a host's leader.
    {{0, 0, 1, 1}, 1, {"lost", "kill"}, "ok lost", "0, 1 | 2, 3"},
    {{0, 0, 0, 1}, 1, {"lost", "kill"}, "ok lost", "0, 1, 2 | 3"}};
  for (const auto& each : layouts) {
    CAPTURE(each.hosts);
    CAPTURE(each.scenario[0]);
    temp_folder folder;
    auto processes = start_cluster(folder, std::vector<int>(each.host_of.size(), each.replicas),
                                   each.scenario, {"LOCKSTEP_LOG=info"}, {"LOCKSTEP_LOG=info"},
                                   false, "auto", on_hosts(each.host_of));
    const auto hosts = "shared memory: 2 hosts (workers " + each.hosts + ")";
    if (each.scenario[0] == "lost") {
      check_survivors_and_victim(processes, each.expect, hosts);
    } else {
      wait_all(processes, 120s);
      require_all_ok(processes, each.expect);
      require_all_ok(processes, hosts);
      // Every worker's mesh, and the leaders' (one a host) beside their ring.
      const auto n = each.host_of.size();
      require_all_ok(processes, "mesh: the " + std::to_string(n) + " workers connected ("
                                  + std::to_string(n - 1) + " connections each)");
      std::size_t leaders = 0;
      for (const auto& p : processes)
        leaders += p.text().find("mesh: the leaders of 2 hosts connected (1 connection each)")
                   != std::string::npos;
      CHECK(leaders == 2);
    }
    // Killed or not, no worker left a segment on its host.
    for (std::size_t h = 0; h < 2; ++h)
      CHECK_MESSAGE(std::filesystem::is_empty(host_folder(h)), host_folder(h));
  }
  for (std::size_t h = 0; h < 2; ++h)
    std::filesystem::remove_all(host_folder(h));
}

TEST_CASE("devices bear TF's names: /job:worker/replica:0/task:k, the chief's /job:chief") {
  const auto names = [](const std::string& task, int local) {
    std::string out;
    for (int d = 0; d < local; ++d)
      out += (d == 0 ? "" : ", ") + task + "/device:CPU:" + std::to_string(d);
    return out;
  };
  for (const bool with_chief : {false, true}) {
    CAPTURE(with_chief);
    temp_folder folder;
    auto processes = start_cluster(folder, {2, 2, 2}, {"devices"}, {}, {}, with_chief);
    wait_all(processes, 120s);
    require_all_ok(processes, "ok devices");
    for (std::size_t i = 0; i < processes.size(); ++i) {
      const auto task = with_chief && i == 0 ? std::string("/job:chief/replica:0/task:0")
                                             : "/job:worker/replica:0/task:"
                                                 + std::to_string(with_chief ? i - 1 : i);
      CHECK_MESSAGE(processes[i].text().find("devices: " + names(task, 2) + "\n")
                      != std::string::npos,
                    "process " << i << " is " << task << ":\n" << processes[i].text());
    }
  }
}

TEST_CASE("a worker's local_devices are its own; a start that fails keeps the devices' names") {
  using namespace lockstep;
  const cluster_resolver::environment variables{
    {"TF_CONFIG", "{\"cluster\":{\"worker\":[\"127.0.0.1:1\",\"127.0.0.1:2\"]},"
                  "\"task\":{\"type\":\"worker\",\"index\":1}}"}};
  const cluster_resolver resolver{cluster_options{}, variables};
  multi_worker_options options;
  options.local_devices = {device_spec::parse("/job:worker/task:0/cpu:0")};
  try {
    multi_worker_mirrored_strategy s{resolver, options};
    FAIL("another task's device was taken as this worker's");
  } catch (const value_error& e) {
    CHECK(std::string(e.what())
          == "multi_worker_options: local_devices must be this worker's devices "
             "(/job:worker/replica:0/task:1/device:CPU:0 and its like), not "
             "/job:worker/task:0/device:CPU:0");
  }
  CHECK(cpu_device(0).to_string() == "/job:localhost/replica:0/task:0/device:CPU:0");
  CHECK(device_spec::parse("/cpu:0").is_local());
  CHECK_FALSE(device_spec::parse("/job:worker/task:1/cpu:0").is_local());
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

TEST_CASE("a worker killed while the workers connect their ring: the others' starts end at once "
          "with peer_lost_error, not at the join timeout") {
  temp_folder folder;
  // The join timeout is 300 s (the scenario's); check_survivors_and_victim
  // waits 60 s at most.
  auto processes = start_cluster(folder, {1, 1, 1}, {"left"}, {"LOCKSTEP_FAULT=ring-connect:kill"});
  check_survivors_and_victim(processes, "ok left");
  CHECK(processes.back().text().find("LOCKSTEP_FAULT: killed at ring-connect") != std::string::npos);
  // The coordinator names worker 2 (and worker 1 too, when worker 1 had
  // given up because of it by then).
  const auto& coordinator = processes[0].text();
  CHECK_MESSAGE((coordinator.find("worker 2 left while the workers connected their ring")
                   != std::string::npos
                 || coordinator.find("workers 1, 2 left while the workers connected their ring")
                      != std::string::npos),
                coordinator);
}

TEST_CASE("a frozen worker, continued after the others dropped it, says that it was cut off") {
  temp_folder folder;
  auto processes = start_cluster(folder, {1, 1, 1}, {"lost", "freeze"});
  auto survivors = std::vector<process>(processes.begin(), processes.end() - 1);
  wait_all(survivors, 60s); // past the peer timeout: they dropped the frozen worker
  require_all_ok(survivors, "ok lost");
  auto frozen = std::vector<process>{processes.back()};
  REQUIRE(::kill(frozen[0].pid, SIGCONT) == 0);
  wait_all(frozen, 30s);
  require_all_ok(frozen, "ok cut off");
  MESSAGE(frozen[0].text()); // what it said (docs/reliability.md)
}

TEST_CASE("a collective that 1 of 3 workers issues times out there, naming it and every worker "
          "that did not reach it") {
  for (const int local : {1, 2})
    for (const std::string launcher : {"0", "2"}) {
      CAPTURE(local);
      CAPTURE(launcher);
      temp_folder folder;
      auto processes = start_cluster(folder, {local, local, local}, {"skipped", launcher});
      wait_all(processes, 60s);
      require_all_ok(processes, "ok skipped");
      MESSAGE(processes[std::stoul(launcher)].text()); // how long after the timeout (docs)
    }
}

TEST_CASE("a collective that 2 of 3 workers issue times out on both, each naming the worker "
          "that did not reach it") {
  temp_folder folder;
  auto processes = start_cluster(folder, {2, 2, 2}, {"skipped", "1,2"});
  wait_all(processes, 60s);
  require_all_ok(processes, "ok skipped");
}

TEST_CASE("a worker with another replica count fails the join on every worker, naming both") {
  temp_folder folder;
  auto processes = start_cluster(folder, {1, 2}, {"refused"});
  wait_all(processes, 60s);
  require_all_ok(processes, "");
  for (const auto& p : processes)
    CHECK_MESSAGE(p.text().find("refused: rendezvous of job 'multi-worker-test': the workers' "
                                "settings differ (every worker must run with the same): "
                                "replicas per worker is \"1\" on worker 0; \"2\" on worker 1")
                    != std::string::npos,
                  p.text());
}

TEST_CASE("checkpoints of several workers: a two-phase commit, and one resume for all") {
  temp_folder folder;
  auto processes = start_cluster(folder, {2, 2, 2}, {"checkpoints", folder.path().string()});
  check_survivors_and_victim(processes, "ok checkpoints");
}

TEST_CASE("the workers' timelines are on the coordinator's clock, and merge into one") {
  temp_folder folder;
  const auto trace = (folder.path() / "trace.json").string();
  // Worker 1's clock runs 5 s ahead: the rendezvous measures it, and its
  // times are written on worker 0's clock all the same.
  constexpr long long skew_ns = 5'000'000'000;
  auto processes = start_cluster(
    folder, {2, 2}, {"timeline"},
    {"LOCKSTEP_TIMELINE=" + trace, "LOCKSTEP_TIMELINE_TEST_SKEW_NS=" + std::to_string(skew_ns)},
    {"LOCKSTEP_TIMELINE=" + trace});
  wait_all(processes, 60s);
  require_all_ok(processes, "ok timeline");
  const auto record_of = [](const nlohmann::json& t) {
    for (const auto& e : t)
      if (e["name"] == "lockstep")
        return e["args"];
    FAIL("no lockstep record");
    return nlohmann::json{};
  };
  const auto zero = read_trace(trace + ".rank-0");
  const auto one = read_trace(trace + ".rank-1");
  CHECK(record_of(zero)["clock_offset_ns"] == 0);
  const auto offset = record_of(one)["clock_offset_ns"].get<long long>();
  const auto error = record_of(one)["clock_error_ns"].get<long long>();
  CHECK(error > 0);
  CHECK(std::llabs(offset + skew_ns) <= error); // the truth lies within the bound

  const auto merged_path = (folder.path() / "merged.json").string();
  auto merge = std::vector<process>{spawn({test_program("LOCKSTEP_TIMELINE_TOOL"), "merge", "-o",
                                           merged_path, trace + ".rank-0", trace + ".rank-1"},
                                          environment_with({}), folder.path() / "merge.txt")};
  wait_all(merge, 30s);
  REQUIRE_MESSAGE(merge[0].exited_ok(), merge[0].text());
  const auto merged = read_trace(merged_path);
  // Every worker's events, in its file's order.
  const auto spans_of = [](const nlohmann::json& t, long long pid) {
    std::vector<nlohmann::json> spans;
    for (const auto& e : t)
      if (e["ph"] == "X" && e["pid"] == pid)
        spans.push_back(e);
    return spans;
  };
  for (const auto& [pid, file] : {std::pair{0LL, &zero}, std::pair{1LL, &one}}) {
    CAPTURE(pid);
    const auto before = spans_of(*file, pid);
    const auto after = spans_of(merged, pid);
    REQUIRE(after.size() == before.size());
    for (std::size_t i = 0; i < after.size(); ++i)
      CHECK(after[i]["name"] == before[i]["name"]);
  }
  // Each step's all_reduce meets on every replica of both workers: on the
  // one clock, the spans overlap to within the written bound.
  std::map<long long, std::vector<std::pair<double, double>>> by_step;
  for (const auto& e : merged)
    if (e["ph"] == "X" && e["name"] == "all_reduce")
      by_step[e["args"]["step"].get<long long>()].emplace_back(
        e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
  CHECK(by_step.size() == 5);
  for (const auto& [step, spans] : by_step) {
    CAPTURE(step);
    CHECK(spans.size() == 4);
    double latest_start = 0, earliest_end = 1e300;
    for (const auto& [b, e] : spans) {
      latest_start = std::max(latest_start, b);
      earliest_end = std::min(earliest_end, e);
    }
    CHECK(latest_start <= earliest_end + 2.0 * static_cast<double>(error) / 1e3);
  }
  // One worker's file twice is refused, naming it.
  auto refused = std::vector<process>{spawn({test_program("LOCKSTEP_TIMELINE_TOOL"), "merge", "-o",
                                             merged_path, trace + ".rank-0", trace + ".rank-0"},
                                            environment_with({}), folder.path() / "twice.txt")};
  wait_all(refused, 30s);
  CHECK(refused[0].exited_with(2));
  CHECK(refused[0].text().find("both worker 0's") != std::string::npos);
}

TEST_CASE("a worker of an earlier generation cannot join a later one") {
  temp_folder folder;
  // Worker 0 (the coordinator) is of generation 1, worker 1 of 0.
  auto processes = start_cluster(folder, {1, 1}, {"stale"}, {"LOCKSTEP_GENERATION=0"},
                                 {"LOCKSTEP_GENERATION=1"});
  wait_all(processes, 60s);
  require_all_ok(processes, "");
  CHECK(processes[0].text().find("join timed out") != std::string::npos);
  CHECK(processes[1].text().find("refused: ") != std::string::npos);
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
  CHECK(bad[0].text().find("worker 1 failed (killed by signal 9 (SIGKILL))") != std::string::npos);
  CHECK(bad[0].text().find("restart") == std::string::npos); // none asked for

  auto usage = std::vector<process>{spawn({run, "-n", "zero", worker}, environment_with({}),
                                          folder.path() / "usage.txt")};
  wait_all(usage, 10s);
  CHECK(!usage[0].exited_ok());
  CHECK(usage[0].text().find("-n wants a whole number") != std::string::npos);
}

TEST_CASE("lockstep-run passes SIGUSR1 on to every worker without stopping them") {
  temp_folder folder;
  // Each worker says it is ready, then answers SIGUSR1 (the dump signal,
  // named in its environment) by saying so, and exits 0 after it.
  const std::string script = R"(trap 'echo "dump by $LOCKSTEP_DUMP_SIGNAL"; exit 0' USR1;
    echo ready; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; exit 3)";
  auto p = std::vector<process>{spawn({test_program("LOCKSTEP_RUN"), "-n", "2", "sh", "-c", script},
                                      environment_with({}), folder.path() / "dump.txt")};
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  const auto count = [&](const std::string& part) {
    const auto text = p[0].text();
    std::size_t n = 0;
    for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
      ++n;
    return n;
  };
  while (count("ready") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  REQUIRE(count("ready") == 2);
  REQUIRE(::kill(p[0].pid, SIGUSR1) == 0);
  wait_all(p, 30s);
  REQUIRE(p[0].status);
  CHECK_MESSAGE(p[0].exited_ok(), p[0].text());
  CHECK(count("dump by SIGUSR1") == 2);
}

TEST_CASE("lockstep-run --max-restarts: a signal or a lost peer restarts the world, a "
          "configuration error does not") {
  temp_folder folder;
  const auto run = test_program("LOCKSTEP_RUN");
  const auto launched = [&](std::vector<std::string> argv, const std::string& name) {
    argv.insert(argv.begin(), run);
    auto p = std::vector<process>{spawn(argv, environment_with({}), folder.path() / name)};
    wait_all(p, 60s);
    REQUIRE(p[0].status);
    return p[0];
  };
  const auto exit_status = [](const process& p) {
    return WIFEXITED(*p.status) ? WEXITSTATUS(*p.status) : -1;
  };
  const auto has = [](const process& p, const std::string& part) {
    return p.text().find(part) != std::string::npos;
  };
  // Generation 0: worker 1 dies of a signal; 1: worker 0 exits as after a
  // lost peer (75); 2: both succeed. Each worker sees its generation.
  const std::string script = R"(echo "generation $LOCKSTEP_GENERATION";
    case "$LOCKSTEP_GENERATION $TF_CONFIG" in
      0*'"index":1'*) kill -9 $$;;
      1*'"index":0'*) exit 75;;
      2*) exit 0;;
    esac
    sleep 30)";
  const auto recovered = launched({"-n", "2", "--max-restarts", "2", "sh", "-c", script},
                                  "recovered.txt");
  CHECK_MESSAGE(exit_status(recovered) == 0, recovered.text());
  CHECK(has(recovered, "[1] generation 0"));
  CHECK(has(recovered, "worker 1 failed (killed by signal 9 (SIGKILL))"));
  CHECK(has(recovered, "restart 1 of 2 (generation 1)"));
  CHECK(has(recovered, "worker 0 failed (exit status 75: it lost a peer)"));
  CHECK(has(recovered, "restart 2 of 2 (generation 2)"));
  CHECK(has(recovered, "[0] generation 2"));
  CHECK(has(recovered, "[1] generation 2"));

  // Always killed: two restarts, then the signal's status.
  const auto exhausted = launched({"-n", "2", "--max-restarts", "2", "sh", "-c",
                                   "case \"$TF_CONFIG\" in *'\"index\":1'*) kill -9 $$;; esac; "
                                   "sleep 30"},
                                  "exhausted.txt");
  CHECK_MESSAGE(exit_status(exhausted) == 128 + SIGKILL, exhausted.text());
  CHECK(has(exhausted, "restart 2 of 2 (generation 2)"));
  CHECK(has(exhausted, "no restarts left (2 of 2 used)"));

  // A configuration error (2) is final, even beside a lost peer.
  const auto configuration = launched(
    {"-n", "2", "--max-restarts", "3", "sh", "-c",
     "case \"$TF_CONFIG\" in *'\"index\":1'*) exit 2;; esac; sleep 30"},
    "configuration.txt");
  CHECK_MESSAGE(exit_status(configuration) == 2, configuration.text());
  CHECK(has(configuration, "worker 1 failed (exit status 2: a configuration error)"));
  CHECK_FALSE(has(configuration, "restart 1"));
}

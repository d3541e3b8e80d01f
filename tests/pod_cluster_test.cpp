// pod_strategy across processes: a pod of 2 hosts, each a worker process
// of 4 virtual CPU devices on loopback (tests/pod_worker, started here
// with TF_CONFIG and a token), against the same program in one process of
// 8 devices; a host lost inside a host loop; and the assignments the
// workers refuse before they join. POD_WORKER (set by meson) names the
// worker program.

#include "worker_processes.hpp"

#include "test_support.hpp"

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

/// `hosts` worker processes (1: alone, without a cluster) running
/// tests/pod_worker with `args`, started; host i writes to
/// `folder`/<run>-<i>.txt.
std::vector<process> start_pod(const temp_folder& folder, const std::string& run,
                               std::size_t hosts, const std::vector<std::string>& args) {
  const auto base = hosts > 1 ? free_ports(static_cast<int>(hosts)) : 0;
  std::vector<process> processes;
  for (std::size_t i = 0; i < hosts; ++i) {
    std::vector<std::string> argv{test_program("POD_WORKER")};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> environment;
    if (hosts > 1)
      environment = {tf_config(base, hosts, i), "LOCKSTEP_CLUSTER_TOKEN=pod-cluster-test-token-01",
                     "LOCKSTEP_JOB_ID=pod-cluster-test"};
    processes.push_back(spawn(argv, environment_with(environment),
                              folder.path() / (run + "-" + std::to_string(i) + ".txt")));
  }
  return processes;
}

/// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_with(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(prefix))
      out.push_back(line);
  return out;
}

/// The hex floats of the line of `text` that starts with `prefix`.
std::vector<float> numbers(const std::string& text, const std::string& prefix) {
  const auto lines = lines_with(text, prefix);
  REQUIRE_MESSAGE(lines.size() == 1, "one line '" << prefix << "' in:\n" << text);
  std::vector<float> out;
  std::istringstream in(lines[0].substr(prefix.size()));
  for (std::string word; in >> word;)
    out.push_back(std::strtof(word.c_str(), nullptr));
  return out;
}

/// The weights of a run, in order: w1 then w2.
std::vector<float> weights(const std::string& text) {
  auto out = numbers(text, "w1 = ");
  const auto w2 = numbers(text, "w2 = ");
  out.insert(out.end(), w2.begin(), w2.end());
  return out;
}

/// A cluster of 2 workers as its rank-`rank` member sees it; nothing
/// listens at the coordinator's address (the refusals come before the join).
cluster_resolver two_hosts(std::size_t rank) {
  return cluster_resolver{{.world_size = 2, .rank = rank, .coordinator = "127.0.0.1:9"}, {}};
}

pod_options four_devices() {
  pod_options o;
  o.cluster.local_devices = cpu_devices(4);
  return o;
}

} // namespace

TEST_CASE("a pod of 2 hosts x 4 virtual CPU devices across processes trains as one process of "
          "8 devices") {
  temp_folder folder;
  auto alone = start_pod(folder, "alone", 1, {"train", "4", "8"});
  wait_all(alone, 120s);
  require_all_ok(alone, "ok train");
  auto pod = start_pod(folder, "pod", 2, {"train", "4", "4"});
  wait_all(pod, 120s);
  require_all_ok(pod, "ok train");
  const auto one = alone[0].text();
  const auto host0 = pod[0].text();
  const auto host1 = pod[1].text();

  // The pod: 4 replicas of 2 logical cores, 2 on each host; TF's ring on
  // the mesh [2, 1, 2, 2] puts host 1's replicas 2 and 3 on its devices
  // {2, 3} and {0, 1}, and its copies of the variables follow.
  CHECK(lines_with(one, "pod: ")
        == std::vector<std::string>{
          "pod: 1 hosts, 4 replicas per host, 4 replicas in sync, steps_per_run 4"});
  for (const auto& text : {host0, host1})
    CHECK(lines_with(text, "pod: ")
          == std::vector<std::string>{
            "pod: 2 hosts, 2 replicas per host, 4 replicas in sync, steps_per_run 4"});
  const std::string task1 = "/job:worker/replica:0/task:1/device:CPU:";
  CHECK(lines_with(host1, "replicas: ")
        == std::vector<std::string>{"replicas: " + task1 + "2, " + task1 + "0"});
  CHECK(lines_with(host1, "w1 copies: ")
        == std::vector<std::string>{"w1 copies: " + task1 + "2, " + task1 + "0"});
  CHECK(lines_with(host1, "w2 copies: ")
        == std::vector<std::string>{"w2 copies: " + task1 + "3, " + task1 + "1"});
  const std::string task0 = "/job:worker/replica:0/task:0/device:CPU:";
  CHECK(lines_with(host0, "w2 copies: ")
        == std::vector<std::string>{"w2 copies: " + task0 + "1, " + task0 + "3"});

  // The hosts agree bit for bit: every loop's loss and the weights.
  CHECK(lines_with(host0, "loop ").size() == 6);
  CHECK(lines_with(host0, "loop ") == lines_with(host1, "loop "));
  CHECK(weights(host0) == weights(host1));

  // One process reduces the 4 replicas' gradients in another association
  // than local sums then the ring between the hosts (docs/multi_worker.md):
  // the same numbers within float rounding.
  const auto expected = weights(one);
  const auto got = weights(host0);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(got[i] - expected[i]) <= 1e-5f * std::fmax(1.0f, std::fabs(expected[i])));
  }

  // Host loops of 1 step per call give the same bits as loops of 4.
  auto per_step = start_pod(folder, "per-step", 2, {"train", "1", "4"});
  wait_all(per_step, 120s);
  require_all_ok(per_step, "ok train");
  CHECK(lines_with(per_step[0].text(), "loop ").size() == 24);
  CHECK(weights(per_step[0].text()) == weights(host0));
  CHECK(weights(per_step[1].text()) == weights(host1));
}

TEST_CASE("a host that dies inside a host loop: the other raises peer_lost_error naming it") {
  temp_folder folder;
  auto processes = start_pod(folder, "lost", 2, {"lost"});
  auto survivor = std::vector<process>(processes.begin(), processes.begin() + 1);
  wait_all(survivor, 60s);
  require_all_ok(survivor, "ok lost");
  auto& victim = processes.back();
  ::kill(victim.pid, SIGKILL); // dead already, unless it failed otherwise
  int status = 0;
  ::waitpid(victim.pid, &status, 0);
  CHECK_MESSAGE(WIFSIGNALED(status), victim.text());
}

TEST_CASE("assignments that the hosts cannot run are refused on every host before it joins") {
  for (const std::size_t rank : {0, 1}) {
    CAPTURE(rank);
    const auto resolver = two_hosts(rank);
    const auto topology = initialize_pod_system(resolver, cpu_devices(4)).topology;
    REQUIRE(topology.mesh_shape() == mesh_coordinates{2, 1, 2, 2});
    SUBCASE("a replica whose logical cores are on two hosts") {
      const auto across = device_assignment::build(topology, {1, 1, 2, 1}, {}, 4);
      CHECK(error_of<value_error>([&] { (void) pod_strategy{resolver, across, four_devices()}; })
            == "pod_strategy: replica 0 has logical core 0 on task 0 and logical core 1 on "
               "task 1; a replica's logical cores must be on one host (its worker process)");
    }
    SUBCASE("replicas that the hosts do not share evenly") {
      const auto three = device_assignment::build(topology, {1, 1, 1, 2}, {}, 3);
      CHECK(error_of<value_error>([&] { (void) pod_strategy{resolver, three, four_devices()}; })
            == "pod_strategy: 3 replicas cannot be shared evenly by the 2 tasks (hosts) of the "
               "pod; across processes each task (host) runs as many replicas as the others, "
               "consecutive in replica order (task t runs replicas t*m .. t*m + m - 1)");
    }
    SUBCASE("replicas of a host that are not consecutive") {
      const device_assignment alternating{
        topology, {{{0, 0, 0, 0}}, {{0, 0, 1, 0}}, {{1, 0, 0, 0}}, {{1, 0, 1, 0}}}};
      CHECK(error_of<value_error>([&] {
              (void) pod_strategy{resolver, alternating, four_devices()};
            })
            == "pod_strategy: replica 1 runs on task 1, not task 0 (m = 2); across processes "
               "each task (host) runs as many replicas as the others, consecutive in replica "
               "order (task t runs replicas t*m .. t*m + m - 1)");
    }
    SUBCASE("an assignment on the pod of other local devices") {
      const auto two_each = initialize_pod_system(resolver, cpu_devices(2)).topology;
      CHECK(error_of<value_error>([&] {
              (void) pod_strategy{resolver, device_assignment::build(two_each),
                                  four_devices()};
            })
            == "pod_strategy: the device_assignment is on another topology than the cluster's "
               "pod: mesh [2, 1, 2, 2] of 2 tasks x 4 devices, where the assignment's is mesh "
               "[1, 1, 2, 2] of 2 tasks x 2 devices");
    }
  }
}

TEST_CASE("without a cluster the resolver's pod is the pod of this process's devices") {
  const cluster_resolver alone{{}, {}};
  const pod_strategy pod{alone, std::nullopt, four_devices()};
  CHECK(pod.cluster().world_size == 1);
  CHECK(pod.num_hosts() == 1);
  CHECK(pod.num_replicas_in_sync() == 4);
  CHECK(pod.device_assignment().topology() == pod_topology::from_devices(cpu_devices(4)));
  CHECK(pod.extended().worker_devices()
        == std::vector<device_spec>{cpu_device(0).canonical(), cpu_device(1).canonical(),
                                    cpu_device(2).canonical(), cpu_device(3).canonical()});
  const auto sums = pod.run([](replica_context& ctx) {
    return ctx.all_reduce(reduce_op::sum,
                          tensor::scalar(static_cast<float>(ctx.replica_id_in_sync_group())));
  });
  CHECK(sums.primary().at<float>(0) == 6.0f);
}

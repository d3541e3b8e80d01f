// Four workers on two hosts, two on each: network namespaces of their own
// with their own addresses, and each host a /dev/shm of its own (a folder
// of this machine's, bound over /dev/shm in each of its workers' mount
// namespaces). The probe finds the hosts: each host's workers reduce
// through its shared memory, and a ring of the two leaders crosses the
// network. The workers are interleaved (hosts {0, 2} and {1, 3}), so no
// host's ranks are consecutive. The results are exact; a host's leader
// killed mid-run makes every other worker raise peer_lost_error naming it;
// no worker leaves a segment on its host.

#include <doctest/doctest.h>

#include "worker_pair.hpp"

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

constexpr auto hang_limit = 90s;
constexpr std::size_t workers = 4;

std::size_t host_of(std::size_t worker) {
  return worker % 2;
}

/// Worker i's ring port: the hosts' workers need ports of their own.
int ring_port(std::size_t worker) {
  return 2230 + static_cast<int>(worker);
}

class two_hosts {
public:
  two_hosts() {
    for (std::size_t h = 0; h < 2; ++h)
      std::filesystem::create_directories(shm(h));
  }
  ~two_hosts() {
    for (std::size_t h = 0; h < 2; ++h) {
      std::error_code ignored;
      std::filesystem::remove_all(shm(h), ignored);
    }
  }

  /// Host h's /dev/shm.
  std::filesystem::path shm(std::size_t h) const {
    return std::filesystem::path("/dev/shm") / (folder_.path().filename().string() + "-host"
                                                + std::to_string(h));
  }

  /// Starts worker `rank` on its host with netns_worker's `args`.
  process start(std::size_t rank, const std::vector<std::string>& args) {
    std::string cluster;
    for (std::size_t w = 0; w < workers; ++w)
      cluster += std::string(w == 0 ? "" : ",") + "\"" + network_lab::address(host_of(w)) + ":"
                 + std::to_string(w == 0 ? worker_pair::coordinator_port : ring_port(w)) + "\"";
    const auto variables = environment_with(
      {"TF_CONFIG={\"cluster\":{\"worker\":[" + cluster + "]},\"task\":{\"type\":\"worker\","
         + "\"index\":" + std::to_string(rank) + "}}",
       "LOCKSTEP_CLUSTER_TOKEN=netns-suite-token-0123456789abcdef",
       "LOCKSTEP_LISTEN=" + network_lab::address(host_of(rank)) + ":"
         + std::to_string(ring_port(rank)),
       "LOCKSTEP_REPLICAS_PER_WORKER=2", "LOCKSTEP_TRANSPORT=auto", "LOCKSTEP_LOG=info",
       "CUDA_VISIBLE_DEVICES="});
    std::vector<std::string> argv{"unshare", "--mount", "--propagation", "private", "sh", "-c",
                                  "mount --bind " + shm(host_of(rank)).string()
                                    + " /dev/shm && exec \"$0\" \"$@\"",
                                  test_program("NETNS_WORKER")};
    argv.insert(argv.end(), args.begin(), args.end());
    return spawn(lab_.on_host(host_of(rank), argv), variables,
                 folder_.path() / ("worker" + std::to_string(rank) + "."
                                   + std::to_string(started_++) + ".txt"));
  }

  /// No worker left a segment on either host.
  void check_nothing_left() const {
    for (std::size_t h = 0; h < 2; ++h)
      CHECK_MESSAGE(std::filesystem::is_empty(shm(h)), shm(h));
  }

private:
  network_lab lab_{2};
  temp_folder folder_;
  int started_ = 0;
};

std::string report(const std::vector<process>& processes) {
  std::string text;
  for (std::size_t i = 0; i < processes.size(); ++i)
    text += "--- worker " + std::to_string(i) + " (" + processes[i].how() + "):\n"
            + processes[i].text();
  return text;
}

const std::string hosts_found =
  "shared memory: 2 hosts (workers 0, 2 | 1, 3): each host's workers reduce through its memory";

} // namespace

TEST_CASE("two hosts of two workers: each host reduces through its memory, the leaders' ring "
          "crosses the network, and the sums are exact") {
  two_hosts lab;
  // 20 all-reduces of 70,000 floats a replica: the slots' chunks on each
  // host, the ring's segments between the leaders.
  std::vector<process> processes;
  for (std::size_t rank = 0; rank < workers; ++rank)
    processes.push_back(lab.start(rank, {"20", "70000"}));
  wait_all(processes, hang_limit);
  INFO(report(processes));
  require_all_ok(processes, "ok all_reduce 20");
  require_all_ok(processes, hosts_found);
  lab.check_nothing_left();
}

TEST_CASE("a host's leader killed mid-run: every other worker raises peer_lost_error naming it, "
          "and no segment is left") {
  two_hosts lab;
  std::vector<process> processes;
  for (std::size_t rank = 0; rank < workers; ++rank)
    processes.push_back(lab.start(rank, {"--pause-ms", "20", "0", "4096"}));
  {
    INFO(report(processes));
    for (auto& p : processes)
      wait_for_done(p, 3, hang_limit);
  }
  ::kill(processes[1].pid, SIGKILL); // host 1's leader
  wait_all(processes, hang_limit);
  INFO(report(processes));
  for (const std::size_t rank : {0, 2, 3}) {
    CAPTURE(rank);
    CHECK(processes[rank].exited_with(3));
    const auto failure = failure_of(processes[rank].text());
    REQUIRE(failure);
    CHECK(failure->kind == "peer_lost_error");
    CHECK(failure->what.find("worker 1") != std::string::npos);
    CHECK(processes[rank].text().find(hosts_found) != std::string::npos);
  }
  lab.check_nothing_left();
}

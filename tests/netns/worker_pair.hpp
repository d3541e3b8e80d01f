#pragma once

// Two workers of one job, each on a host of its own (a network namespace,
// network_lab.hpp), and the fault proxy on a third host between them.
//
// How the traffic goes through the proxy: a worker finds its peers by the
// names in TF_CONFIG (docs/multi_worker.md): rank 1 dials the coordinator
// (rank 0's address, w0:2222), and each rank dials the next one's ring
// address, which that rank advertised at the rendezvous: rank 0 the
// coordinator's host with its ring port (LOCKSTEP_LISTEN=0.0.0.0:2223),
// rank 1 its listen host (LOCKSTEP_LISTEN=w1:2224). Every connection
// between them is made to a name, so each host's own hosts file decides
// where it goes: straight to the other worker's host, or to the proxy's
// host, whose forwards (2222 and 2223 to host 0, 2224 to host 1) take it
// on. Both workers see the same TF_CONFIG, so they derive the same job id.

#include "fault_proxy_process.hpp"
#include "network_lab.hpp"

#include "../worker_processes.hpp"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

class worker_pair {
public:
  static constexpr int coordinator_port = 2222;
  static constexpr int ring_port_0 = 2223;
  static constexpr int ring_port_1 = 2224;
  static constexpr std::size_t proxy_host = 2;

  /// The hosts; the workers' names lead straight to each other until
  /// `route_through_proxy`.
  worker_pair() {
    route_directly();
  }

  /// Each worker's name for the other now leads to the proxy's host.
  void route_through_proxy() {
    lab_.set_hosts_file(0, {{"w0", network_lab::address(0)},
                            {"w1", network_lab::address(proxy_host)}});
    lab_.set_hosts_file(1, {{"w0", network_lab::address(proxy_host)},
                            {"w1", network_lab::address(1)}});
  }

  /// Each worker's name for the other leads to its host.
  void route_directly() {
    for (std::size_t host : {0, 1})
      lab_.set_hosts_file(host, {{"w0", network_lab::address(0)}, {"w1", network_lab::address(1)}});
  }

  /// Starts the proxy on its host, forwarding the three ports, with
  /// `options` (--delay, --jitter, ...), and routes the workers through it.
  fault_proxy_process& start_proxy(const std::vector<std::string>& options = {}) {
    const auto forward = [](int port, std::size_t host) {
      return std::to_string(port) + "=" + network_lab::address(host) + ":" + std::to_string(port);
    };
    std::vector<std::string> argv{test_program("FAULT_PROXY"), "--forward",
                                  forward(coordinator_port, 0), "--forward",
                                  forward(ring_port_0, 0), "--forward", forward(ring_port_1, 1)};
    argv.insert(argv.end(), options.begin(), options.end());
    proxy_.emplace(lab_.on_host(proxy_host, argv), folder_.path() / "proxy.txt");
    route_through_proxy();
    return *proxy_;
  }

  fault_proxy_process& proxy() { return *proxy_; }

  /// What `workers` and the proxy printed, for a failure's message (doctest's
  /// INFO calls it only when a check fails).
  std::string report(const std::vector<process>& workers) const {
    std::string text;
    for (std::size_t i = 0; i < workers.size(); ++i)
      text += "--- worker " + std::to_string(i) + " (" + workers[i].how() + "):\n"
              + workers[i].text();
    if (proxy_)
      text += "--- the proxy:\n" + proxy_->text();
    return text;
  }
  const network_lab& lab() const { return lab_; }
  const std::filesystem::path& folder() const { return folder_.path(); }

  /// The environment of worker `rank`: TF_CONFIG with both names, the
  /// token, its listen address, one replica, the ring as the transport
  /// (the hosts are network namespaces of one machine, which share
  /// /dev/shm, and the network path is what these tests are about), and
  /// `extra`.
  std::vector<std::string> environment(std::size_t rank,
                                        const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> variables{
      "TF_CONFIG={\"cluster\":{\"worker\":[\"w0:" + std::to_string(coordinator_port)
        + "\",\"w1:" + std::to_string(ring_port_1) + "\"]},\"task\":{\"type\":\"worker\","
        + "\"index\":" + std::to_string(rank) + "}}",
      "LOCKSTEP_CLUSTER_TOKEN=netns-suite-token-0123456789abcdef",
      rank == 0 ? "LOCKSTEP_LISTEN=0.0.0.0:" + std::to_string(ring_port_0)
                : "LOCKSTEP_LISTEN=w1:" + std::to_string(ring_port_1),
      "LOCKSTEP_REPLICAS_PER_WORKER=1", "LOCKSTEP_TRANSPORT=tcp", "CUDA_VISIBLE_DEVICES="};
    variables.insert(variables.end(), extra.begin(), extra.end());
    return environment_with(variables);
  }

  /// Starts `argv` as worker `rank` on its host; its output goes to a file
  /// of the pair's folder.
  process start(std::size_t rank, const std::vector<std::string>& argv,
                const std::vector<std::string>& extra = {}) {
    const auto output =
      folder_.path() / ("worker" + std::to_string(rank) + "." + std::to_string(started_++) + ".txt");
    return spawn(lab_.on_host(rank, argv), environment(rank, extra), output);
  }

private:
  // Destroyed in reverse: the proxy first, then the folder, then the hosts
  // (which kill whatever still runs on them).
  network_lab lab_{3};
  temp_folder folder_;
  std::optional<fault_proxy_process> proxy_;
  int started_ = 0;
};

/// The number in the last "done K" line of `text`; 0 if none.
inline std::size_t collectives_done(const std::string& text) {
  std::size_t done = 0;
  for (auto at = text.find("done "); at != std::string::npos; at = text.find("done ", at + 1))
    if (at == 0 || text[at - 1] == '\n')
      done = std::strtoull(text.c_str() + at + 5, nullptr, 10);
  return done;
}

/// Waits until `p` printed "done `count`" (or ended), at most `limit`.
inline void wait_for_done(process& p, std::size_t count, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (collectives_done(p.text()) < count) {
    int status = 0;
    if (!p.status && ::waitpid(p.pid, &status, WNOHANG) == p.pid)
      p.status = status;
    REQUIRE_MESSAGE(!p.status, "the worker ended before its all_reduce #" << count << " ("
                                 << p.how() << "):\n" << p.text());
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline,
                    "the worker did not finish all_reduce #" << count << " within "
                                                             << limit.count() << " s:\n"
                                                             << p.text());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// What a worker printed when a lockstep error ended it: the all-reduce,
/// when (steady clock, ns), the error's kind and text.
struct worker_failure {
  std::size_t collective = 0;
  std::uint64_t at_ns = 0;
  std::string kind;
  std::string what;
};

inline std::optional<worker_failure> failure_of(const std::string& text) {
  const auto at = text.find("failed in all_reduce #");
  if (at == std::string::npos)
    return std::nullopt;
  worker_failure f;
  char* end = nullptr;
  f.collective = std::strtoull(text.c_str() + at + 22, &end, 10);
  const std::string rest(end);
  const auto ns = rest.find(" at ");
  f.at_ns = std::strtoull(rest.c_str() + ns + 4, &end, 10);
  std::string line(end);
  line = line.substr(0, line.find('\n'));
  // " ns: <kind>: <what>"
  const auto kind_at = line.find(": ") + 2;
  const auto what_at = line.find(": ", kind_at);
  f.kind = line.substr(kind_at, what_at - kind_at);
  f.what = line.substr(what_at + 2);
  return f;
}

inline std::uint64_t steady_now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now().time_since_epoch())
                                      .count());
}

/// `to` - `from`, steady clock nanoseconds, in milliseconds.
inline double milliseconds_between(std::uint64_t from, std::uint64_t to) {
  return (static_cast<double>(to) - static_cast<double>(from)) / 1e6;
}

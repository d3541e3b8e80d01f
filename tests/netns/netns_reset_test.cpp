// Connections reset (RST) between two workers on hosts of their own, by
// the fault proxy between them: in the middle of an all-reduce's data, the
// collective ends with an error on both workers, and every all-reduce that
// completed before it gave the exact sums (each worker checks every element
// against the closed form); never wrong data.

#include <doctest/doctest.h>

#include "worker_pair.hpp"

#include <chrono>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

constexpr auto hang_limit = 60s;

/// Both workers ended with peer_lost_error in an all-reduce, after every
/// earlier one gave the right numbers; returns the all-reduce of each.
/// `fault_at`: when the test caused the fault (steady clock, ns), or 0.
std::vector<std::size_t> require_failed(std::vector<process>& workers, std::uint64_t fault_at) {
  std::vector<std::size_t> collectives;
  for (std::size_t rank = 0; rank < workers.size(); ++rank) {
    const auto text = workers[rank].text();
    INFO("worker " << rank << " (" << workers[rank].how() << "):\n" << text);
    // 3: a lockstep error; 1 would be a wrong element (or another failure).
    REQUIRE(workers[rank].exited_with(3));
    const auto failure = failure_of(text);
    REQUIRE(failure);
    CHECK(failure->kind == "peer_lost_error");
    CHECK(collectives_done(text) + 1 == failure->collective);
    collectives.push_back(failure->collective);
    if (fault_at != 0)
      MESSAGE("worker " << rank << " failed in all_reduce #" << failure->collective << ", "
                        << milliseconds_between(fault_at, failure->at_ns)
                        << " ms after the reset: " << failure->what);
    else
      MESSAGE("worker " << rank << " failed in all_reduce #" << failure->collective << ": "
                        << failure->what);
  }
  return collectives;
}

} // namespace

TEST_CASE("a ring connection reset in the middle of an all-reduce's data ends that all-reduce "
          "with an error on both workers, never with wrong data") {
  worker_pair pair;
  auto& proxy = pair.start_proxy();
  // Each all-reduce of 1 Mi floats (4 MiB) sends 4 MiB from worker 0 to
  // worker 1 on the ring connection (its reduce-scatter half, then its
  // all-gather half), plus a few hundred bytes of handshake and records.
  // A reset once 2.25 times that has passed falls a quarter into the third
  // all-reduce's reduce-scatter, where neither worker can finish it.
  constexpr std::uint64_t bytes = std::uint64_t{4} << 20;
  proxy.command("reset-at " + std::to_string(2 * bytes + bytes / 4) + " "
                + std::to_string(worker_pair::ring_port_1));
  const std::vector<std::string> worker{test_program("NETNS_WORKER"), "0",
                                        std::to_string(bytes / 4)};
  // The ring's data on the ring (and no measurement of the links, whose
  // megabytes on the mesh would count towards the reset).
  const std::vector<std::string> ring_only{"LOCKSTEP_ALGORITHM=ring",
                                           "LOCKSTEP_LINK_COSTS=50,1,1"};
  std::vector<process> workers{pair.start(0, worker, ring_only), pair.start(1, worker, ring_only)};
  {
    INFO(pair.report(workers));
    wait_all(workers, hang_limit);
    REQUIRE(proxy.lines_starting("reset " + std::to_string(worker_pair::ring_port_1)) == 1);
  }
  // Both in the third, the one the reset cut.
  CHECK(require_failed(workers, 0) == std::vector<std::size_t>{3, 3});
}

TEST_CASE("every connection reset at once in the middle of the job (control and ring): both "
          "workers end with peer_lost_error at once, never with wrong data") {
  worker_pair pair;
  auto& proxy = pair.start_proxy();
  const std::vector<std::string> worker{test_program("NETNS_WORKER"), "0", "262144"};
  std::vector<process> workers{pair.start(0, worker), pair.start(1, worker)};
  std::uint64_t reset_at = 0;
  {
    INFO(pair.report(workers));
    wait_for_done(workers[0], 3, hang_limit);
    reset_at = steady_now_ns(); // before the command travels: an upper bound of the time
    proxy.command("reset");
    wait_all(workers, hang_limit);
    // The control connection, both ring ones and the mesh's, and nothing
    // after.
    CHECK(proxy.lines_starting_after("ok reset", "reset ") == 0);
    const auto text = proxy.text();
    std::size_t cut = 0;
    for (auto at = text.find("(the reset command)"); at != std::string::npos;
         at = text.find("(the reset command)", at + 1))
      ++cut;
    CHECK(cut == 4);
  }
  // The reset may fall where one worker has all it needs of an all-reduce
  // and the other not yet: that one fails in the next.
  const auto failed = require_failed(workers, reset_at);
  CHECK(failed[0] + 1 >= failed[1]);
  CHECK(failed[1] + 1 >= failed[0]);
}

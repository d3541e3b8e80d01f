// A partition between two workers on hosts of their own: the fault proxy
// between them holds every byte of every connection (control and ring),
// closing nothing, as a switch that stops forwarding would. One longer than
// the peer timeout makes both workers raise peer_lost_error, each naming
// the other, and the test prints how long after the partition each did (a
// measurement for docs/reliability.md, never asserted); a generous limit
// catches a hang. One shorter than the peer timeout costs nothing: the job
// goes on with the right numbers.

#include <doctest/doctest.h>

#include "worker_pair.hpp"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

/// A hang, not a slow detection: peer_timeout is 2 s.
constexpr auto hang_limit = 60s;

} // namespace

TEST_CASE("a partition longer than the peer timeout raises peer_lost_error on both sides") {
  worker_pair pair;
  auto& proxy = pair.start_proxy();
  const std::vector<std::string> worker{test_program("NETNS_WORKER"), "--peer-timeout-ms", "2000",
                                        "--heartbeat-ms", "200", "0", "65536"};
  std::vector<process> workers{pair.start(0, worker), pair.start(1, worker)};
  std::uint64_t stalled_at = 0;
  {
    INFO(pair.report(workers));
    wait_for_done(workers[0], 3, hang_limit);
    wait_for_done(workers[1], 3, hang_limit);
    // Taken before the command travels: an upper bound of the time.
    stalled_at = steady_now_ns();
    proxy.command("stall");
    wait_all(workers, hang_limit);
  }
  for (std::size_t rank = 0; rank < 2; ++rank) {
    const auto text = workers[rank].text();
    INFO("worker " << rank << " (" << workers[rank].how() << "):\n" << text);
    REQUIRE(workers[rank].exited_with(3));
    const auto failure = failure_of(text);
    REQUIRE(failure);
    CHECK(failure->kind == "peer_lost_error");
    // Each names the other: the coordinator worker 1, worker 1 the coordinator.
    const auto other = "worker " + std::to_string(1 - rank);
    CHECK(failure->what.find(other) != std::string::npos);
    CHECK(failure->what.find("peer_timeout") != std::string::npos);
    MESSAGE("worker " << rank << " raised peer_lost_error "
                      << milliseconds_between(stalled_at, failure->at_ns)
                      << " ms after the partition (peer_timeout 2000 ms, heartbeat 200 ms): "
                      << failure->what);
  }
  // The proxy held the bytes: it closed and reset nothing. (Before, it
  // reset worker 1's dials that came before the coordinator listened.)
  CHECK(proxy.lines_starting_after("ok stall", "reset ") == 0);
}

TEST_CASE("a partition shorter than the peer timeout costs nothing: the job goes on, every "
          "result right") {
  worker_pair pair;
  auto& proxy = pair.start_proxy();
  // 30 all-reduces 100 ms apart: the partition comes after the 3rd and
  // lasts 500 ms, a quarter of the peer timeout.
  const std::vector<std::string> worker{test_program("NETNS_WORKER"), "--peer-timeout-ms", "2000",
                                        "--heartbeat-ms", "200", "--pause-ms", "100", "30",
                                        "65536"};
  std::vector<process> workers{pair.start(0, worker), pair.start(1, worker)};
  INFO(pair.report(workers));
  wait_for_done(workers[0], 3, hang_limit);
  proxy.command("stall");
  std::this_thread::sleep_for(500ms);
  const auto done_in_partition = collectives_done(workers[0].text());
  proxy.command("resume");
  REQUIRE(done_in_partition + 3 < 30); // the partition came in the middle of the job
  wait_for_done(workers[0], done_in_partition + 3, hang_limit);
  wait_for_done(workers[1], done_in_partition + 3, hang_limit);
  // Nothing was cut (at the end, a worker that exits may leave its peer's
  // last bytes unread, whose close is a reset).
  CHECK(proxy.lines_starting_after("ok stall", "reset ") == 0);
  wait_all(workers, hang_limit);
  require_all_ok(workers, "ok all_reduce 30");
}

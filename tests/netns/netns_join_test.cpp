// Joining across hosts. A worker started before its coordinator, through a
// proxy that accepts its connections and closes them while the coordinator
// does not listen (as a proxy, a load balancer or a Kubernetes service
// does), joins once the coordinator starts: it takes the closed handshake
// for a coordinator not there yet and tries again until the join deadline.
//
// A worker of a stale generation whose host comes back: the job was
// restarted as generation 1 (LOCKSTEP_GENERATION, which lockstep-run and
// other launchers count up at each restart), and the host that was away
// still runs its worker of generation 0. The coordinator refuses its
// handshake and says why, naming the host's own address; the stale worker
// gets authentication_error; the coordinator goes on waiting, and the
// worker of generation 1 from the same host joins and the job runs.

#include <doctest/doctest.h>

#include "worker_pair.hpp"

#include <chrono>
#include <string>
#include <vector>

using namespace std::chrono_literals;

TEST_CASE("a worker of a stale generation is refused; the current one from the same host joins") {
  worker_pair pair; // straight from host to host: the coordinator sees host 1's address
  const std::vector<std::string> worker{test_program("NETNS_WORKER"), "3", "1000"};
  std::vector<process> coordinator{pair.start(0, worker, {"LOCKSTEP_GENERATION=1"})};
  // tests/multi_worker_worker's `stale`: expects authentication_error
  // naming the generation among its causes.
  std::vector<process> stale{pair.start(1, {test_program("MULTI_WORKER_PROGRAM"), "stale"},
                                        {"LOCKSTEP_GENERATION=0"})};
  wait_all(stale, 60s);
  INFO("the stale worker (" << stale[0].how() << "):\n" << stale[0].text());
  REQUIRE(stale[0].exited_ok());
  CHECK(stale[0].text().find("refused: ") != std::string::npos);
  std::vector<process> workers{std::move(coordinator[0]),
                               pair.start(1, worker, {"LOCKSTEP_GENERATION=1"})};
  wait_all(workers, 60s);
  require_all_ok(workers, "ok all_reduce 3");
  // The coordinator logged the refusal with the stale host's address and why.
  const auto log = workers[0].text();
  INFO("the coordinator:\n" << log);
  CHECK(log.find(network_lab::address(1) + ":") != std::string::npos);
  CHECK(log.find("generation") != std::string::npos);
  MESSAGE("the stale worker: " << stale[0].text() << "the coordinator: " << log);
}

TEST_CASE("a worker that reaches its coordinator through a proxy before the coordinator listens "
          "joins once it does") {
  worker_pair pair;
  auto& proxy = pair.start_proxy();
  const std::vector<std::string> worker{test_program("NETNS_WORKER"), "3", "1000"};
  std::vector<process> workers{pair.start(1, worker)};
  // The proxy accepted worker 1's connection and, finding no coordinator,
  // closed it: twice, so the worker did try again.
  proxy.wait_for_lines("reset " + std::to_string(worker_pair::coordinator_port), 2);
  workers.insert(workers.begin(), pair.start(0, worker));
  wait_all(workers, 60s);
  INFO(pair.report(workers));
  require_all_ok(workers, "ok all_reduce 3");
}

// The node actor's failure detection, without sockets: its sends and its
// loss go to a recorder, and the test plays the peers' messages and the
// links' failures (node/node_actor.hpp).

#include "node/node_actor.hpp"

#include "actor_system/actor_system.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <variant>
#include <thread>
#include <vector>

using namespace lockstep::detail;
using namespace std::chrono_literals;

namespace {

/// What a node actor sent and declared, filled from its thread.
struct recorder {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<std::uint32_t, heartbeat>> beats;
  std::vector<std::pair<std::uint32_t, collective_abort>> aborts;
  std::vector<std::pair<std::uint32_t, collective_progress>> progress;
  std::vector<std::string> losses;
  /// What the node's `reached` returns: its last collective between workers.
  std::uint64_t reached = 0;

  node_actor_settings settings(std::uint32_t rank, std::vector<std::uint32_t> peers,
                               std::chrono::milliseconds timeout) {
    return {.rank = rank,
            .peers = std::move(peers),
            .heartbeat_interval = 20ms,
            .peer_timeout = timeout,
            .progress_wait = 100ms,
            .send =
              [this](std::uint32_t peer, const control_post& message) {
                std::lock_guard lock{mutex};
                if (const auto* beat = std::get_if<heartbeat>(&message))
                  beats.emplace_back(peer, *beat);
                else if (const auto* abort = std::get_if<collective_abort>(&message))
                  aborts.emplace_back(peer, *abort);
                else
                  progress.emplace_back(peer, std::get<collective_progress>(message));
                changed.notify_all();
              },
            .reached = [this] { return reached; },
            .on_lost =
              [this](const lockstep::detail::error_value& why) {
                std::lock_guard lock{mutex};
                losses.push_back(why.message);
                changed.notify_all();
              }};
  }

  /// Waits (at most 10 s) until `done` holds under the lock.
  template <class Done>
  bool await(Done done) {
    std::unique_lock lock{mutex};
    return changed.wait_for(lock, 10s, [&] { return done(); });
  }
};

struct fixture {
  std::shared_ptr<caf::actor_system> system = shared_actor_system();
  recorder seen;
};

} // namespace

TEST_CASE_FIXTURE(fixture, "a node sends heartbeats to each peer, numbered from 1, and stops whole") {
  auto node = spawn_node_actor(*system, seen.settings(0, {1, 2}, 10s));
  REQUIRE(seen.await([&] { return seen.beats.size() >= 6; }));
  {
    std::lock_guard lock{seen.mutex};
    CHECK(seen.beats[0].second.sequence == 1);
    CHECK(seen.beats[0].second.rank == 0);
    CHECK(seen.beats[0].first != seen.beats[1].first); // one to each peer
    CHECK(seen.beats[2].second.sequence == 2);
  }
  CHECK(stop_node_actor(*system, node, 5s)); // nobody was lost
  CHECK(seen.losses.empty());
}

TEST_CASE_FIXTURE(fixture, "a silent peer is lost after peer_timeout; one that beats is not") {
  auto node = spawn_node_actor(*system, seen.settings(0, {1, 2}, 300ms));
  // Worker 1 keeps beating; worker 2 never does.
  for (int i = 0; i < 10 && seen.losses.empty(); ++i) {
    caf::anon_send(node, heartbeat{1, 0, static_cast<std::uint64_t>(i + 1), 0});
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(seen.await([&] { return !seen.losses.empty(); }));
  std::lock_guard lock{seen.mutex};
  CHECK(seen.losses.size() == 1);
  CHECK(seen.losses[0].find("worker 2 was lost: no heartbeat for 300 ms (peer_timeout)")
        != std::string::npos);
  // The coordinator tells the survivor which rank was lost, and the lost
  // one, should it still read, that it was cut off (not that "worker 2 was
  // lost").
  REQUIRE(seen.aborts.size() == 2);
  for (const auto& [peer, abort] : seen.aborts) {
    CHECK(abort.error.kind == lockstep::detail::error_kind::peer_lost_error);
    if (peer == 1)
      CHECK(abort.error.message == seen.losses[0]);
    else
      CHECK(abort.error.message
            == "this worker (rank 2) was cut off from the job: worker 0 (the coordinator) heard "
               "no heartbeat from it for 300 ms (peer_timeout) and the job went on without it: "
               "was the process stopped or frozen, or the network cut?");
  }
}

TEST_CASE_FIXTURE(fixture, "a failed link loses its peer at once, and only the first loss counts") {
  auto node = spawn_node_actor(*system, seen.settings(0, {1, 2}, 10s));
  caf::anon_send(node, link_failure{2, "its control connection closed (reset)"});
  caf::anon_send(node, link_failure{1, "its control connection closed (reset)"});
  REQUIRE(seen.await([&] { return !seen.losses.empty(); }));
  std::this_thread::sleep_for(100ms);
  {
    std::lock_guard lock{seen.mutex};
    CHECK(seen.losses.size() == 1);
    CHECK(seen.losses[0] == "worker 2 was lost: its control connection closed (reset)");
  }
  CHECK_FALSE(stop_node_actor(*system, node, 5s)); // the group was broken: no goodbye
}

TEST_CASE_FIXTURE(fixture, "a peer that said goodbye is not lost when its connection closes") {
  auto node = spawn_node_actor(*system, seen.settings(1, {0}, 10s));
  caf::anon_send(node, heartbeat{0, 0, 0, 0}); // goodbye
  caf::anon_send(node, link_failure{0, "its control connection closed"});
  std::this_thread::sleep_for(200ms);
  CHECK(stop_node_actor(*system, node, 5s));
  std::lock_guard lock{seen.mutex};
  CHECK(seen.losses.empty());
}

TEST_CASE_FIXTURE(fixture, "a worker takes the coordinator's word of a loss, and passes nothing on") {
  auto node = spawn_node_actor(*system, seen.settings(1, {0}, 10s));
  collective_abort abort;
  abort.error.message = "worker 2 was lost: its control connection closed";
  caf::anon_send(node, abort);
  REQUIRE(seen.await([&] { return !seen.losses.empty(); }));
  std::lock_guard lock{seen.mutex};
  CHECK(seen.losses[0] == abort.error.message);
  CHECK(seen.aborts.empty()); // only the coordinator forwards
}

TEST_CASE_FIXTURE(fixture, "the coordinator asks every worker which collective it reached and "
                           "answers the asker; a worker that does not answer is marked") {
  seen.reached = 7;
  auto node = spawn_node_actor(*system, seen.settings(0, {1, 2, 3}, 10s));
  // Worker 2's collective #8 passed its deadline: it asks (`reached` empty).
  caf::anon_send(node, std::uint32_t{2}, collective_progress{2, 0, 8, {}});
  REQUIRE(seen.await([&] { return seen.progress.size() == 3; }));
  {
    std::lock_guard lock{seen.mutex};
    for (const auto& [peer, question] : seen.progress)
      CHECK(question == collective_progress{2, 0, 8, {}}); // to every worker
  }
  // Workers 1 and 2 answer; worker 3 never does.
  caf::anon_send(node, std::uint32_t{1}, collective_progress{2, 0, 8, {6}});
  caf::anon_send(node, std::uint32_t{2}, collective_progress{2, 0, 8, {8}});
  REQUIRE(seen.await([&] { return seen.progress.size() == 4; }));
  {
    std::lock_guard lock{seen.mutex};
    CHECK(seen.progress[3].first == 2);
    CHECK(seen.progress[3].second
          == collective_progress{2, 0, 8, {7, 6, 8, collective_progress::no_answer}});
  }
  CHECK(stop_node_actor(*system, node, 5s)); // before `seen` goes
}

TEST_CASE_FIXTURE(fixture, "a worker answers the coordinator's question, and its own question is "
                           "answered through the coordinator") {
  seen.reached = 4;
  auto node = spawn_node_actor(*system, seen.settings(1, {0}, 10s));
  caf::anon_send(node, std::uint32_t{0}, collective_progress{2, 0, 5, {}});
  REQUIRE(seen.await([&] { return seen.progress.size() == 1; }));
  {
    std::lock_guard lock{seen.mutex};
    CHECK(seen.progress[0].first == 0);
    CHECK(seen.progress[0].second == collective_progress{2, 0, 5, {4}});
  }
  // Its own collective #5 timed out: the question goes to the coordinator,
  // and the answers come back to the one who asked.
  caf::scoped_actor self{*system};
  std::vector<std::uint64_t> answers;
  std::thread coordinator([&] {
    CHECK(seen.await([&] { return seen.progress.size() == 2; }));
    std::unique_lock lock{seen.mutex};
    CHECK(seen.progress.back().second == collective_progress{1, 0, 5, {}});
    lock.unlock();
    caf::anon_send(node, std::uint32_t{0}, collective_progress{1, 0, 5, {5, 5, 3}});
  });
  self->request(node, 10s, progress_atom::value, std::uint64_t{5})
    .receive([&](const collective_progress& p) { answers = p.reached; },
             [](const caf::error&) { FAIL("no answer"); });
  coordinator.join();
  CHECK(answers == std::vector<std::uint64_t>{5, 5, 3});
  CHECK(stop_node_actor(*system, node, 5s)); // before `seen` goes
}

TEST_CASE_FIXTURE(fixture, "a worker's timeout goes to the coordinator, which passes it on to "
                           "every other worker with its kind") {
  auto node = spawn_node_actor(*system, seen.settings(0, {1, 2, 3}, 10s));
  collective_abort abort;
  abort.rank = 2;
  abort.error = {lockstep::detail::error_kind::timeout_error, "all_reduce #3 timed out", ""};
  caf::anon_send(node, abort);
  REQUIRE(seen.await([&] { return seen.aborts.size() == 2 && !seen.losses.empty(); }));
  {
    std::lock_guard lock{seen.mutex};
    CHECK(seen.losses[0] == "all_reduce #3 timed out");
    for (const auto& [peer, passed] : seen.aborts) {
      CHECK(peer != 2); // it knows
      CHECK(passed.error.kind == lockstep::detail::error_kind::timeout_error);
      CHECK(passed.error.message == "all_reduce #3 timed out");
    }
  }
  CHECK_FALSE(stop_node_actor(*system, node, 5s)); // the group is broken: no goodbye
}

// The node actor's failure detection, without sockets: its sends and its
// loss go to a recorder, and the test plays the peers' messages and the
// links' failures (actors/node_actor.hpp).

#include "actors/actor_system.hpp"
#include "actors/messages.hpp"
#include "actors/node_actor.hpp"

#include <caf/actor_system.hpp>
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

using namespace lockstep::actors;
using namespace std::chrono_literals;

namespace {

/// What a node actor sent and declared, filled from its thread.
struct recorder {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<std::uint32_t, heartbeat>> beats;
  std::vector<std::pair<std::uint32_t, collective_abort>> aborts;
  std::vector<std::string> losses;

  node_actor_settings settings(std::uint32_t rank, std::vector<std::uint32_t> peers,
                               std::chrono::milliseconds timeout) {
    return {.rank = rank,
            .peers = std::move(peers),
            .heartbeat_interval = 20ms,
            .peer_timeout = timeout,
            .send =
              [this](std::uint32_t peer, const control_post& message) {
                std::lock_guard lock{mutex};
                if (const auto* beat = std::get_if<heartbeat>(&message))
                  beats.emplace_back(peer, *beat);
                else
                  aborts.emplace_back(peer, std::get<collective_abort>(message));
                changed.notify_all();
              },
            .on_lost =
              [this](const std::string& why) {
                std::lock_guard lock{mutex};
                losses.push_back(why);
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
  // The coordinator tells the survivor, and not the lost one, which rank it was.
  REQUIRE(seen.aborts.size() >= 1);
  for (const auto& [peer, abort] : seen.aborts)
    CHECK(abort.error.message == seen.losses[0]);
  CHECK(seen.aborts[0].first == 1);
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

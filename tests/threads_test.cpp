// lockstep's own synchronization without CAF (the one-device and default
// strategies never start an actor system), so it also runs under
// ThreadSanitizer: per-thread modes, the default strategy shared by all
// threads, and the one-thread-at-a-time claim on a strategy.
//
// The threads only record what they saw, each in its own slot; the checks
// run on the test's thread after the joins, so a failure names the thread,
// the step and the value.

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

using namespace lockstep;

namespace {

/// What one step of a thread in the first test saw.
struct step_seen {
  bool strategy_outside_scope = true;       // has_strategy() before scope()
  bool replica_context_outside_scope = false; // get_replica_context() != nullptr before scope()
  bool own_strategy_in_run = false;         // get_strategy() == mine inside run()
  device_spec device_in_run;                // ctx.devices()[0] inside run()
  int merged = -1;                          // run()'s result: merge_call's i + 1
  bool replica_context_in_scope = true;     // get_replica_context() != nullptr in scope
};

/// What one thread of the first test saw: its steps, then the default
/// strategy's replica id after its own strategy's scope ended.
struct thread_seen {
  std::vector<step_seen> steps;
  std::size_t default_replica_id = ~std::size_t{0};
};

} // namespace

TEST_CASE("threads keep their own modes and share the default strategy") {
  constexpr int threads = 8;
  constexpr int steps = 200;
  std::vector<thread_seen> seen(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([t, &seen] {
      auto& mine_seen = seen[t];
      one_device_strategy mine{cpu_device(t)};
      for (int i = 0; i < steps; ++i) {
        step_seen s;
        s.strategy_outside_scope = has_strategy();
        s.replica_context_outside_scope = get_replica_context() != nullptr; // the default's
        auto guard = mine.scope();
        auto result = mine.run([&](replica_context& ctx) {
          s.own_strategy_in_run = get_strategy() == mine;
          s.device_in_run = ctx.devices()[0];
          return ctx.merge_call([](const per_replica<int>& v) { return v[0] + 1; }, i);
        });
        s.merged = result[0];
        s.replica_context_in_scope = get_replica_context() != nullptr; // cross-replica in scope
        mine_seen.steps.push_back(s);
      }
      auto shared = get_strategy().run([](replica_context& ctx) { return ctx.replica_id_in_sync_group(); });
      mine_seen.default_replica_id = shared[0];
    });
  }
  for (auto& th : pool)
    th.join();

  for (int t = 0; t < threads; ++t) {
    CAPTURE(t);
    const auto& thread = seen[t];
    REQUIRE(thread.steps.size() == steps);
    for (int i = 0; i < steps; ++i) {
      CAPTURE(i);
      const auto& s = thread.steps[i];
      CHECK_FALSE(s.strategy_outside_scope);
      CHECK(s.replica_context_outside_scope);
      CHECK(s.own_strategy_in_run);
      CHECK(s.device_in_run == cpu_device(t));
      CHECK(s.merged == i + 1);
      CHECK_FALSE(s.replica_context_in_scope);
    }
    CHECK(thread.default_replica_id == 0u);
  }
}

TEST_CASE("two threads using one strategy: one of them is refused, none races") {
  one_device_strategy shared{"/cpu:0"};
  std::atomic<int> refused{0};
  std::atomic<int> completed{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        try {
          shared.run([] { std::this_thread::yield(); });
          ++completed;
        } catch (const context_error&) {
          ++refused;
        }
      }
    });
  }
  for (auto& th : pool)
    th.join();
  const int completed_runs = completed;
  const int refused_runs = refused;
  CAPTURE(completed_runs);
  CAPTURE(refused_runs);
  CHECK(completed_runs + refused_runs == 1200);
  CHECK(completed_runs > 0);
}

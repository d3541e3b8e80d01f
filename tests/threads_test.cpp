// lockstep's own synchronization without CAF (the one-device and default
// strategies never start an actor system), so it also runs under
// ThreadSanitizer: per-thread modes, the default strategy shared by all
// threads, and the one-thread-at-a-time claim on a strategy.

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

using namespace lockstep;

TEST_CASE("threads keep their own modes and share the default strategy") {
  constexpr int threads = 8;
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([t, &failures] {
      one_device_strategy mine{cpu_device(t)};
      for (int i = 0; i < 200; ++i) {
        if (has_strategy() || get_replica_context() == nullptr)
          ++failures;
        auto guard = mine.scope();
        auto result = mine.run([&](replica_context& ctx) {
          if (!(get_strategy() == mine) || ctx.devices()[0] != cpu_device(t))
            ++failures;
          return ctx.merge_call([](const per_replica<int>& v) { return v[0] + 1; }, i);
        });
        if (result[0] != i + 1)
          ++failures;
        auto doubled = get_replica_context(); // nullptr: cross-replica in scope
        if (doubled != nullptr)
          ++failures;
      }
      auto shared = get_strategy().run([](replica_context& ctx) { return ctx.replica_id_in_sync_group(); });
      if (shared[0] != 0)
        ++failures;
    });
  }
  for (auto& th : pool)
    th.join();
  CHECK(failures == 0);
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
  CHECK(completed + refused == 1200);
  CHECK(completed > 0);
}

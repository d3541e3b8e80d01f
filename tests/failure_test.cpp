// Failures in the actor protocol: exceptions keep their type and unwind the
// other replicas, mismatched merge_call counts, stalls that time out and
// name the replica, busy replicas after a timeout, and clean shutdown.

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

struct custom_error : std::runtime_error {
  int code;
  explicit custom_error(int c) : std::runtime_error("custom " + std::to_string(c)), code(c) {}
};

std::size_t id_of(replica_context& ctx) {
  return ctx.replica_id_in_sync_group();
}

std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

/// The strategy still works: every replica runs and merges.
void check_usable(const strategy& s) {
  auto sums = s.run([](replica_context& ctx) {
    return ctx.merge_call([](const per_replica<std::size_t>& v) { return v.size(); }, id_of(ctx));
  });
  for (auto x : sums.values())
    CHECK(x == s.num_replicas_in_sync());
}

/// Busy replicas become free once their user code returns; a replica left
/// busy for good fails this after a few seconds.
void check_eventually_usable(const strategy& s) {
  for (int attempt = 0; attempt < 500; ++attempt) {
    try {
      check_usable(s);
      return;
    } catch (const timeout_error&) {
      std::this_thread::sleep_for(10ms);
    }
  }
  FAIL("the strategy stayed busy");
}

const std::string cpu1 = "replica 1 (/job:localhost/replica:0/task:0/device:CPU:1)";

} // namespace

TEST_CASE("an exception in one replica reaches the caller with its type; the others unwind") {
  for (int n : {1, 2, 3, 4, 7}) {
    CAPTURE(n);
    mirrored_strategy s{cpu_devices(n)};
    const auto thrower = static_cast<std::size_t>(n - 1);
    std::atomic<int> unwound{0};
    try {
      s.run([&](replica_context& ctx) {
        struct on_unwind {
          std::atomic<int>& count;
          ~on_unwind() { ++count; }
        } guard{unwound};
        if (id_of(ctx) == thrower)
          throw custom_error{static_cast<int>(thrower)};
        ctx.merge_call([] {});
        FAIL("a replica passed a merge_call that another replica never reached");
      });
      FAIL("run did not throw");
    } catch (const custom_error& e) {
      CHECK(e.code == n - 1);
    }
    CHECK(unwound == n);
    check_usable(s);
  }
}

TEST_CASE("an exception in merge_fn reaches the caller with its type") {
  mirrored_strategy s{cpu_devices(3)};
  CHECK_THROWS_AS(s.run([](replica_context& ctx) {
                    return ctx.merge_call([](const per_replica<std::size_t>&) -> int { throw custom_error{7}; },
                                          id_of(ctx));
                  }),
                  custom_error);
  check_usable(s);
}

TEST_CASE("an exception in a run nested inside merge_fn reaches the caller") {
  mirrored_strategy s{cpu_devices(2)};
  CHECK_THROWS_WITH_AS(s.run([](replica_context& ctx) {
                         ctx.merge_call([](strategy& st) {
                           st.run([](replica_context& inner) {
                             if (id_of(inner) == 1)
                               throw std::out_of_range("nested");
                           });
                         });
                       }),
                       "nested", std::out_of_range);
  check_usable(s);
}

TEST_CASE("a merge_fn may catch the failure of its nested run and go on") {
  mirrored_strategy s{cpu_devices(3)};
  auto result = s.run([](replica_context& ctx) {
    return ctx.merge_call([](strategy& st) {
      try {
        st.run([](replica_context& inner) {
          if (id_of(inner) == 0)
            throw custom_error{1};
          inner.merge_call([] {});
        });
      } catch (const custom_error&) {
        return 99;
      }
      return 0;
    });
  });
  CHECK(result.values() == std::vector<int>{99, 99, 99});
  check_usable(s);
}

TEST_CASE("different numbers of merge_call calls are TF's error, naming the replicas") {
  mirrored_strategy s{cpu_devices(3)};
  CHECK_THROWS_WITH_AS(s.run([](replica_context& ctx) {
                         if (id_of(ctx) == 1)
                           ctx.merge_call([] {});
                       }),
                       doctest::Contains("Some replicas made a different number of "
                                         "replica_context().merge_call() calls. Returned: replica 0 ("),
                       context_error);
  try {
    s.run([](replica_context& ctx) {
      if (id_of(ctx) == 1)
        ctx.merge_call([] {});
    });
  } catch (const context_error& e) {
    CHECK(std::string{e.what()}.find("waiting in merge_call: " + cpu1) != std::string::npos);
  }
  check_usable(s);
}

TEST_CASE("merge_call arguments of different types are a type_error") {
  mirrored_strategy s{cpu_devices(2)};
  CHECK_THROWS_WITH_AS(s.run([](replica_context& ctx) {
                         if (id_of(ctx) == 0)
                           ctx.merge_call([](const per_replica<int>&) {}, 1);
                         else
                           ctx.merge_call([](const per_replica<double>&) {}, 1.0);
                       }),
                       doctest::Contains("merge_call: replica 1 passed arguments of a different type"), type_error);
  check_usable(s);
}

TEST_CASE("a replica that does not reach merge_call times out, named; then it is busy until it returns") {
  std::atomic<bool> release{false};
  mirrored_strategy s{cpu_devices(3)};
  const run_options quick{300ms}; // long enough for replica 0 to reach merge_call under load
  try {
    s.run(quick, [&](replica_context& ctx) {
      if (id_of(ctx) == 1)
        while (!release)
          std::this_thread::sleep_for(1ms);
      ctx.merge_call([] {});
    });
    FAIL("no timeout");
  } catch (const timeout_error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("run timed out after 300 ms: " + cpu1 + " did not return or reach merge_call") == 0);
    CHECK(what.find("waiting in merge_call: replica 0 (") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(s.run([] {}), (cpu1 + " still runs a replica function from a call that timed out; "
                                             "the strategy accepts new calls once it returns").c_str(),
                       timeout_error);
  release = true;
  // Its late merge_call is unwound and its late result discarded.
  check_eventually_usable(s);
}

TEST_CASE("the strategy's timeout applies when a call names none") {
  std::atomic<bool> release{false};
  mirrored_strategy s{cpu_devices(2), {nullptr, 50ms}};
  CHECK(s.extended().timeout() == 50ms);
  CHECK_THROWS_WITH_AS(s.run([&](replica_context& ctx) {
                         if (id_of(ctx) == 0)
                           while (!release)
                             std::this_thread::sleep_for(1ms);
                       }),
                       doctest::Contains("run timed out after 50 ms: replica 0 ("), timeout_error);
  release = true;
}

TEST_CASE("a replica failing while another is stalled: the failure wins after the timeout") {
  std::atomic<bool> release{false};
  mirrored_strategy s{cpu_devices(2)};
  CHECK_THROWS_AS(s.run(run_options{100ms},
                        [&](replica_context& ctx) {
                          if (id_of(ctx) == 0)
                            throw custom_error{3};
                          while (!release)
                            std::this_thread::sleep_for(1ms);
                        }),
                  custom_error);
  release = true;
}

TEST_CASE("creating and destroying strategies leaks no threads") {
  // CAF's replica threads are detached: one may still be leaving for a moment
  // after its strategy is gone, so wait (bounded) for the count to drop.
  auto settled = [](std::size_t at_most) {
    for (int i = 0; i < 2000 && thread_count() > at_most; ++i)
      std::this_thread::sleep_for(1ms);
    return thread_count();
  };
  const auto before = settled(1);
  for (int i = 0; i < 20; ++i) {
    mirrored_strategy s{cpu_devices(4)};
    check_usable(s);
  }
  CHECK(settled(before) == before);
}

TEST_CASE("destroying a strategy whose replica is stuck in user code does not hang") {
  // Outlive the abandoned replica thread, which still uses its context.
  static std::atomic<bool> release{false};
  static std::atomic<int> seen_replicas{0};
  {
    mirrored_strategy s{cpu_devices(2), {nullptr, 50ms}};
    CHECK_THROWS_AS(s.run([&](replica_context& ctx) {
                      if (id_of(ctx) == 1) {
                        while (!release)
                          std::this_thread::sleep_for(1ms);
                        seen_replicas = static_cast<int>(ctx.num_replicas_in_sync());
                      }
                    }),
                    timeout_error);
  }
  release = true; // the strategy is gone; its state must still be valid
  for (int i = 0; i < 2000 && seen_replicas == 0; ++i)
    std::this_thread::sleep_for(1ms);
  CHECK(seen_replicas == 2);
}

TEST_CASE("a nested run that times out inside merge_fn leaves the replica free once it returns") {
  mirrored_strategy s{cpu_devices(2)};
  CHECK_THROWS_WITH_AS(s.run(run_options{200ms},
                             [](replica_context& ctx) {
                               ctx.merge_call([](strategy& st) {
                                 st.run(run_options{200ms}, [](replica_context& inner) {
                                   if (id_of(inner) == 1)
                                     std::this_thread::sleep_for(400ms);
                                 });
                               });
                             }),
                       doctest::Contains(("run timed out after 200 ms: " + cpu1).c_str()), timeout_error);
  check_eventually_usable(s);
}

TEST_CASE("a stalled replica that returns while others unwind is not left busy") {
  mirrored_strategy s{cpu_devices(2)};
  struct slow_unwind {
    ~slow_unwind() { std::this_thread::sleep_for(300ms); }
  };
  CHECK_THROWS_AS(s.run(run_options{200ms},
                        [](replica_context& ctx) {
                          if (id_of(ctx) == 1) {
                            std::this_thread::sleep_for(350ms);
                            return;
                          }
                          slow_unwind guard;
                          ctx.merge_call([] {});
                        }),
                  timeout_error);
  check_eventually_usable(s); // both returned during the unwind
}

TEST_CASE("a merge function slower than the replicas' patience fails the call, nobody busy") {
  mirrored_strategy s{cpu_devices(2)};
  CHECK_THROWS_WITH_AS(s.run(run_options{100ms},
                             [](replica_context& ctx) {
                               ctx.merge_call([](strategy& st) {
                                 std::this_thread::sleep_for(400ms);
                                 st.run([] {});
                               });
                             }),
                       doctest::Contains("heard nothing from the strategy actor for 200 ms while waiting "
                                         "in merge_call"),
                       timeout_error);
  check_eventually_usable(s);
}

TEST_CASE("run_options timeouts are validated") {
  mirrored_strategy s{cpu_devices(2)};
  CHECK_THROWS_WITH_AS(s.run(run_options{0ms}, [] {}),
                       "run_options: the timeout must be greater than 0 and at most 1e9 s, got 0 ms",
                       value_error);
  CHECK_THROWS_AS(s.run(run_options{std::chrono::milliseconds::max()}, [] {}), value_error);
  CHECK_THROWS_AS(mirrored_strategy(cpu_devices(2), {nullptr, std::chrono::milliseconds::max()}),
                  value_error);
  check_usable(s);
}

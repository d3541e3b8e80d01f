// tcp_ring_communicator as the leaders' stage of a hierarchical_communicator:
// 2 workers (groups) x 2 replicas, each worker's replicas meeting over
// shared memory and the workers over a loopback ring, against closed-form
// results; a failure on one rank failing the collective everywhere and
// leaving the ring usable; a lost worker failing the others with
// peer_lost_error, then and in every later collective; per-call
// algorithms that differ, or need a mesh the ring has not; the flight
// recorder's last 16 entries. One thread per replica, no actor system:
// suite 'unit'.

#include "communicators/tcp_ring_communicator.hpp"

#include "collectives/hierarchical_communicator.hpp"
#include "communicators/shm_communicator.hpp"

#include "file_support.hpp"
#include "loopback_ring.hpp"
#include "test_support.hpp"

#include "lockstep/error.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using lockstep::detail::test::loopback_ring;

namespace {

constexpr std::size_t workers = 2;
constexpr std::size_t replicas = 2;

/// Each worker's hierarchical communicator over its own shm group and its
/// end of the ring.
struct cluster {
  loopback_ring ring{workers};
  std::vector<std::shared_ptr<tcp_ring_communicator>> leaders;
  std::vector<std::shared_ptr<hierarchical_communicator>> by_worker;

  cluster() {
    for (std::size_t w = 0; w < workers; ++w) {
      leaders.push_back(std::make_shared<tcp_ring_communicator>(ring.take(w)));
      by_worker.push_back(std::make_shared<hierarchical_communicator>(
        std::make_shared<shm_communicator>(replicas, "worker " + std::to_string(w), "replica"),
        leaders.back(), w));
    }
  }

  /// Runs `work(communicator, global rank)` on one thread per replica;
  /// returns what each threw.
  std::vector<std::exception_ptr> run(
    const std::function<void(communicator&, std::size_t)>& work) {
    std::vector<std::exception_ptr> errors(workers * replicas);
    std::vector<std::thread> threads;
    for (std::size_t g = 0; g < workers * replicas; ++g)
      threads.emplace_back([&, g] {
        try {
          work(*by_worker[g / replicas], g);
        } catch (...) {
          errors[g] = std::current_exception();
        }
      });
    for (auto& t : threads)
      t.join();
    return errors;
  }
};

tensor filled(std::size_t global_rank, std::size_t elements, std::size_t g_device) {
  std::vector<float> values(elements);
  for (std::size_t i = 0; i < elements; ++i)
    values[i] = static_cast<float>((i % 13) + 10 * global_rank);
  return tensor::from(values, {static_cast<std::int64_t>(elements)},
                      cpu_device(static_cast<int>(g_device)));
}

} // namespace

TEST_CASE("all-reduce, all-gather and broadcast across 2 workers x 2 replicas") {
  cluster c;
  const auto errors = c.run([](communicator& comm, std::size_t g) {
    for (const std::size_t elements : {std::size_t{1}, std::size_t{5}, std::size_t{70'001}}) {
      std::vector<tensor> data{filled(g, elements, g % replicas)};
      comm.all_reduce(g, reduce_op::sum, data, data, {});
      const auto result = data[0].data<float>();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < elements; ++i)
        wrong += result[i] != static_cast<float>(4 * (i % 13) + 10 * (0 + 1 + 2 + 3));
      CHECK(wrong == 0);
    }
    auto mine = filled(g, 3, g % replicas);
    auto all = tensor::uninitialized(dtype::f32, {12}, cpu_device(static_cast<int>(g % replicas)));
    comm.all_gather(g, mine, all, {});
    for (std::size_t r = 0; r < 4; ++r)
      CHECK(all.data<float>()[r * 3 + 1] == static_cast<float>(1 + 10 * r));
    std::vector<tensor> message{filled(g, 4, g % replicas)};
    comm.broadcast(g, 3, message, {});
    CHECK(message[0].data<float>()[2] == 32.0f);
  });
  for (const auto& e : errors)
    CHECK(e == nullptr);
}

TEST_CASE("a rank that cannot contribute fails the collective on every worker; the ring goes on") {
  cluster c;
  const auto errors = c.run([](communicator& comm, std::size_t g) {
    std::vector<tensor> data{filled(g, 8, g % replicas)};
    collective_options options;
    if (g == 3) // worker 1's second replica
      options.failure = std::make_exception_ptr(dtype_error("replica 3 had no gradient"));
    CHECK_THROWS_WITH_AS(comm.all_reduce(g, reduce_op::sum, data, data, options),
                         "replica 3 had no gradient", dtype_error);
    // The next collective works.
    std::vector<tensor> again{filled(g, 8, g % replicas)};
    comm.all_reduce(g, reduce_op::sum, again, again, {});
    CHECK(again[0].data<float>()[1] == 4.0f + 60.0f);
  });
  for (const auto& e : errors)
    CHECK(e == nullptr);
}

TEST_CASE("per-call algorithms: workers that choose differently are told in the agreement, and "
          "one that needs a mesh the ring has not is refused on every worker; the ring goes on") {
  cluster c;
  const auto errors = c.run([](communicator& comm, std::size_t g) {
    std::vector<tensor> data{filled(g, 8, g % replicas)};
    collective_options options;
    if (g / replicas == 1) // worker 1
      options.algorithm = algorithm::recursive_doubling;
    CHECK_THROWS_WITH_AS(comm.all_reduce(g, reduce_op::sum, data, data, options),
                         doctest::Contains("workers chose different algorithms: worker 0 none, "
                                           "worker 1 recursive_doubling"),
                         value_error);
    options.algorithm = algorithm::halving_doubling; // on every worker
    CHECK_THROWS_WITH_AS(comm.all_reduce(g, reduce_op::sum, data, data, options),
                         doctest::Contains("algorithm halving_doubling (all_reduce #2 sum "
                                           "float32 [8] by halving_doubling) needs a connection "
                                           "to every worker"),
                         value_error);
    std::vector<tensor> again{filled(g, 8, g % replicas)};
    options.algorithm = algorithm::ring;
    comm.all_reduce(g, reduce_op::sum, again, again, options);
    CHECK(again[0].data<float>()[1] == 4.0f + 60.0f);
  });
  for (const auto& e : errors)
    CHECK(e == nullptr);
}

namespace {

/// Every replica of worker 0 all-reduces 1000 elements with `timeout`;
/// what each threw.
std::vector<std::exception_ptr> all_reduce_on_worker_0(cluster& c,
                                                       std::chrono::milliseconds timeout) {
  std::vector<std::exception_ptr> errors(replicas);
  std::vector<std::thread> threads;
  for (std::size_t g = 0; g < replicas; ++g)
    threads.emplace_back([&, g] {
      try {
        std::vector<tensor> data{filled(g, 1000, g)};
        collective_options options;
        options.timeout = timeout;
        c.by_worker[0]->all_reduce(g, reduce_op::sum, data, data, options);
      } catch (...) {
        errors[g] = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  return errors;
}

} // namespace

TEST_CASE("a lost worker: the others get peer_lost_error now and in every later collective") {
  cluster c;
  // Worker 1 is gone: its end of the ring closes, as when its process dies.
  c.leaders[1].reset();
  c.by_worker[1].reset();
  const auto errors = all_reduce_on_worker_0(c, std::chrono::seconds{30});
  for (const auto& e : errors) {
    const auto message = error_of<peer_lost_error>([&] { std::rethrow_exception(e); });
    CHECK(contains(message, "the ring of workers is broken at worker 0"));
    CHECK(contains(message, "worker 1"));
  }
  std::vector<tensor> later{filled(0, 4, 0)};
  CHECK_THROWS_AS(c.leaders[0]->all_reduce(0, reduce_op::sum, later, later, {}), peer_lost_error);
  CHECK(contains(c.leaders[0]->session().dump(), "sum float32 [1000]: ring broken"));
}

TEST_CASE("a collective one worker skips times out on the other at its deadline, naming it and "
          "the worker that did not reach it; the other throws it too") {
  cluster c;
  // The node's part, played here: the answer to "which collective did each
  // worker reach?", and the word passed on to the other worker.
  c.leaders[0]->explain_timeouts(
    std::chrono::milliseconds{100},
    [&](std::uint64_t) {
      return std::vector<std::uint64_t>{c.leaders[0]->reached(), c.leaders[1]->reached()};
    },
    [&](const error_value& why) { c.leaders[1]->break_ring(why); });
  const auto errors = all_reduce_on_worker_0(c, std::chrono::milliseconds{300});
  const std::string expected =
    "all_reduce #1 between the workers (sum float32 [1000]) timed out on worker 0 after 300 ms "
    "(its timeout): worker 1 did not reach it (worker 1 has issued none)";
  // Both replicas of worker 0 throw the leaders' timeout, not their fan-out's.
  for (const auto& e : errors)
    CHECK(contains(error_of<timeout_error>([&] { std::rethrow_exception(e); }), expected));
  // Worker 1 comes to it late: the same timeout.
  std::vector<tensor> late{filled(2, 1000, 0)};
  CHECK(contains(error_of<timeout_error>([&] {
          c.leaders[1]->all_reduce(1, reduce_op::sum, late, late, {});
        }),
        expected));
  CHECK(contains(c.leaders[0]->session().dump(), "sum float32 [1000]: timed out"));
}

TEST_CASE("without the node, a timeout says that the others could not be asked") {
  cluster c;
  std::vector<tensor> data{filled(0, 4, 0)};
  collective_options options;
  options.timeout = std::chrono::milliseconds{100};
  const auto message = error_of<timeout_error>(
    [&] { c.leaders[0]->all_reduce(0, reduce_op::sum, data, data, options); });
  CHECK(contains(message, "all_reduce #1 between the workers (sum float32 [4]) timed out on "
                          "worker 0 after 100 ms (its timeout): the other workers could not be "
                          "asked which collectives they reached; no data came from worker 1"));
}

TEST_CASE("the flight recorder keeps the last 16 collectives between workers, oldest first") {
  cluster c;
  const auto errors = c.run([](communicator& comm, std::size_t g) {
    for (std::size_t elements = 1; elements <= 20; ++elements) {
      std::vector<tensor> data{filled(g, elements, g % replicas)};
      comm.all_reduce(g, reduce_op::sum, data, data, {});
    }
  });
  for (const auto& e : errors)
    CHECK(e == nullptr);
  std::string expected;
  for (std::size_t seq = 5; seq <= 20; ++seq)
    expected += "all_reduce #" + std::to_string(seq) + " sum float32 [" + std::to_string(seq)
                + "]: completed\n";
  CHECK(c.leaders[0]->session().dump() == expected);
}

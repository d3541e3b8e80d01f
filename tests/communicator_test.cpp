// Communicators without CAF: the shared-memory communicator's four
// collectives, and a hierarchical communicator of two shared-memory groups
// (standing in for two processes) and one of their leaders, checked
// against a flat communicator of all ranks, failures included. Plain
// threads, so this also runs under ThreadSanitizer.

#include "collectives/hierarchical_communicator.hpp"
#include "communicators/shm_communicator.hpp"

#include "lockstep/error.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

#include "rank_threads.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using namespace std::chrono_literals;

namespace {

const collective_options options{.timeout = 60s};

/// Rank r's input of `count` elements: small integers, so that sums in
/// any order are exact in float32 too.
tensor input_of(dtype type, std::size_t rank, std::int64_t count) {
  auto t = tensor::zeros(type, {count});
  for (std::int64_t i = 0; i < count; ++i)
    visit_dtype(type, [&]<class T>(T) {
      t.data<T>()[static_cast<std::size_t>(i)] = static_cast<T>((rank * 7 + static_cast<std::size_t>(i) * 3) % 11 + 1);
    });
  return t;
}

/// Two groups of two ranks and their leaders: rank g·2 + l calls
/// groups[g] with its global rank.
struct two_processes {
  std::shared_ptr<communicator> leaders = std::make_shared<shm_communicator>(2, "leaders");
  std::vector<std::shared_ptr<communicator>> groups{
    std::make_shared<hierarchical_communicator>(std::make_shared<shm_communicator>(2, "process 0"),
                                                leaders, 0),
    std::make_shared<hierarchical_communicator>(std::make_shared<shm_communicator>(2, "process 1"),
                                                leaders, 1)};

  communicator& of(std::size_t rank) { return *groups[rank / 2]; }
};

void check_all_ok(const std::vector<outcome>& outcomes) {
  for (const auto& result : outcomes)
    CHECK_MESSAGE(result.kind.empty(), (result.kind + ": " + result.what));
}

} // namespace

TEST_CASE("shm_communicator: all_reduce, reduce_scatter, all_gather and broadcast") {
  shm_communicator comm{3, "shm"};
  CHECK(comm.size() == 3);
  std::vector<tensor> inputs, reduced, scattered, gathered, broadcasted;
  for (std::size_t r = 0; r < 3; ++r) {
    inputs.push_back(input_of(dtype::i32, r, 6));
    reduced.push_back(tensor::zeros(dtype::i32, {6}));
    scattered.push_back(tensor::zeros(dtype::i32, {2}));
    gathered.push_back(tensor::zeros(dtype::i32, {18}));
    broadcasted.push_back(r == 1 ? input_of(dtype::i32, 9, 6) : tensor::zeros(dtype::i32, {6}));
  }
  check_all_ok(run_ranks(3, [&](std::size_t r) {
    comm.all_reduce(r, reduce_op::sum, {&inputs[r], 1}, {&reduced[r], 1}, options);
    comm.reduce_scatter(r, reduce_op::max, inputs[r], scattered[r], options);
    comm.all_gather(r, inputs[r], gathered[r], options);
    comm.broadcast(r, 1, {&broadcasted[r], 1}, options);
  }));
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::int64_t i = 0; i < 6; ++i) {
      std::int32_t sum = 0, max = 0;
      for (std::size_t q = 0; q < 3; ++q) {
        sum += inputs[q].at<std::int32_t>(i);
        max = std::max(max, inputs[q].at<std::int32_t>(i));
      }
      CHECK(reduced[r].at<std::int32_t>(i) == sum);
      if (i / 2 == static_cast<std::int64_t>(r))
        CHECK(scattered[r].at<std::int32_t>(i % 2) == max);
      for (std::size_t q = 0; q < 3; ++q)
        CHECK(gathered[r].at<std::int32_t>(static_cast<std::int64_t>(q) * 6 + i)
              == inputs[q].at<std::int32_t>(i));
    }
    CHECK(broadcasted[r] == input_of(dtype::i32, 9, 6));
  }
}

TEST_CASE("shm_communicator: buffers that do not fit are refused before the rendezvous") {
  shm_communicator comm{2, "shm"};
  auto input = tensor::zeros(dtype::f32, {5});
  auto output = tensor::zeros(dtype::f32, {2});
  CHECK_THROWS_WITH_AS(comm.reduce_scatter(0, reduce_op::sum, input, output, options),
                       "reduce_scatter in group 'shm' (rank 0): expected the input to hold 2 "
                       "blocks of the output's 2 elements, got 5",
                       value_error);
  auto wide = tensor::zeros(dtype::f64, {4});
  CHECK_THROWS_AS(comm.all_gather(0, output, wide, options), dtype_error);
  CHECK_THROWS_AS(comm.broadcast(0, 2, {&output, 1}, options), value_error);
}

TEST_CASE("hierarchical_communicator of two groups gives a flat communicator's results") {
  for (auto type : {dtype::i32, dtype::f32, dtype::f64}) {
    for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                    reduce_op::prod}) {
      CAPTURE(to_string(type));
      CAPTURE(to_string(op));
      two_processes world;
      shm_communicator flat{4, "flat"};
      // Two tensors, one below the inline size and one of several chunks.
      std::vector<std::vector<tensor>> inputs(4), split(4), joined(4);
      for (std::size_t r = 0; r < 4; ++r) {
        inputs[r] = {input_of(type, r, 3), input_of(type, r + 4, 3000)};
        for (const auto& t : inputs[r]) {
          split[r].push_back(tensor::zeros(type, t.shape()));
          joined[r].push_back(tensor::zeros(type, t.shape()));
        }
      }
      check_all_ok(run_ranks(8, [&](std::size_t thread) {
        const auto r = thread % 4;
        if (thread < 4)
          world.of(r).all_reduce(r, op, inputs[r], split[r], options);
        else
          flat.all_reduce(r, op, inputs[r], joined[r], options);
      }));
      for (std::size_t r = 0; r < 4; ++r)
        for (std::size_t k = 0; k < 2; ++k)
          CHECK(split[r][k] == joined[r][k]);
    }
  }
}

TEST_CASE("hierarchical_communicator: reduce_scatter, all_gather and broadcast across groups") {
  two_processes world;
  shm_communicator flat{4, "flat"};
  std::vector<tensor> inputs, scattered, flat_scattered, gathered, flat_gathered, broadcasted;
  for (std::size_t r = 0; r < 4; ++r) {
    inputs.push_back(input_of(dtype::i64, r, 8));
    scattered.push_back(tensor::zeros(dtype::i64, {2}));
    flat_scattered.push_back(tensor::zeros(dtype::i64, {2}));
    gathered.push_back(tensor::zeros(dtype::i64, {32}));
    flat_gathered.push_back(tensor::zeros(dtype::i64, {32}));
    broadcasted.push_back(r == 3 ? input_of(dtype::i64, 11, 8) : tensor::zeros(dtype::i64, {8}));
  }
  check_all_ok(run_ranks(8, [&](std::size_t thread) {
    const auto r = thread % 4;
    if (thread < 4) {
      world.of(r).reduce_scatter(r, reduce_op::sum, inputs[r], scattered[r], options);
      world.of(r).all_gather(r, inputs[r], gathered[r], options);
      world.of(r).broadcast(r, 3, {&broadcasted[r], 1}, options);
    } else {
      flat.reduce_scatter(r, reduce_op::sum, inputs[r], flat_scattered[r], options);
      flat.all_gather(r, inputs[r], flat_gathered[r], options);
    }
  }));
  for (std::size_t r = 0; r < 4; ++r) {
    CHECK(scattered[r] == flat_scattered[r]);
    CHECK(gathered[r] == flat_gathered[r]);
    CHECK(broadcasted[r] == input_of(dtype::i64, 11, 8));
  }
}

TEST_CASE("hierarchical_communicator of groups of different sizes, ranks not consecutive, gives "
          "a flat communicator's results") {
  // Five ranks as the workers of two hosts might be: {0, 3} and {1, 2, 4}.
  const rank_groups layout{{{0, 3}, {1, 2, 4}}};
  const auto leaders = std::make_shared<shm_communicator>(2, "leaders");
  hierarchical_communicator hosts[] = {
    {std::make_shared<shm_communicator>(2, "host 0"), leaders, layout, 0},
    {std::make_shared<shm_communicator>(3, "host 1"), leaders, layout, 1}};
  const auto of = [&](std::size_t r) -> hierarchical_communicator& {
    return hosts[r == 0 || r == 3 ? 0 : 1];
  };
  shm_communicator flat{5, "flat"};
  std::vector<tensor> inputs, reduced, flat_reduced, mean, flat_mean, scattered, flat_scattered,
    gathered, flat_gathered, broadcasted, empty_gathered;
  for (std::size_t r = 0; r < 5; ++r) {
    inputs.push_back(input_of(dtype::i64, r, 10));
    for (auto* t : {&reduced, &flat_reduced, &mean, &flat_mean})
      t->push_back(tensor::zeros(dtype::i64, {10}));
    scattered.push_back(tensor::zeros(dtype::i64, {2}));
    flat_scattered.push_back(tensor::zeros(dtype::i64, {2}));
    gathered.push_back(tensor::zeros(dtype::i64, {50}));
    flat_gathered.push_back(tensor::zeros(dtype::i64, {50}));
    broadcasted.push_back(r == 2 ? input_of(dtype::i64, 11, 10) : tensor::zeros(dtype::i64, {10}));
    empty_gathered.push_back(tensor::zeros(dtype::i64, {0}));
  }
  check_all_ok(run_ranks(10, [&](std::size_t thread) {
    const auto r = thread % 5;
    if (thread < 5) {
      of(r).all_reduce(r, reduce_op::sum, {&inputs[r], 1}, {&reduced[r], 1}, options);
      of(r).all_reduce(r, reduce_op::mean, {&inputs[r], 1}, {&mean[r], 1}, options);
      of(r).reduce_scatter(r, reduce_op::max, inputs[r], scattered[r], options);
      of(r).all_gather(r, inputs[r], gathered[r], options);
      of(r).broadcast(r, 2, {&broadcasted[r], 1}, options);
      const auto none = tensor::zeros(dtype::i64, {0});
      of(r).all_gather(r, none, empty_gathered[r], options);
    } else {
      flat.all_reduce(r, reduce_op::sum, {&inputs[r], 1}, {&flat_reduced[r], 1}, options);
      flat.all_reduce(r, reduce_op::mean, {&inputs[r], 1}, {&flat_mean[r], 1}, options);
      flat.reduce_scatter(r, reduce_op::max, inputs[r], flat_scattered[r], options);
      flat.all_gather(r, inputs[r], flat_gathered[r], options);
    }
  }));
  for (std::size_t r = 0; r < 5; ++r) {
    CAPTURE(r);
    CHECK(reduced[r] == flat_reduced[r]);
    CHECK(mean[r] == flat_mean[r]);
    CHECK(scattered[r] == flat_scattered[r]);
    CHECK(gathered[r] == flat_gathered[r]);
    CHECK(broadcasted[r] == input_of(dtype::i64, 11, 10));
  }
  // Each rank counted its six collectives (the reduce-scatter is one).
  for (std::size_t r = 0; r < 5; ++r)
    CHECK(of(r).reached(r) == 6);
}

TEST_CASE("hierarchical_communicator: a failure on one rank fails the collective on every "
          "rank of every group, and the next one runs") {
  two_processes world;
  // Rank 3 (group 1, not a leader) cannot contribute; then rank 0 (group 0's
  // leader) cannot.
  for (std::size_t failing : {3u, 0u}) {
    CAPTURE(failing);
    auto outcomes = run_ranks(4, [&](std::size_t r) {
      auto x = input_of(dtype::f32, r, 1000);
      auto o = options;
      if (r == failing)
        o.failure = std::make_exception_ptr(shape_error("rank " + std::to_string(r) + " failed"));
      world.of(r).all_reduce(r, reduce_op::sum, {&x, 1}, {&x, 1}, o);
    });
    for (const auto& o : outcomes) {
      CHECK(o.kind == "shape_error");
      CHECK(o.what == "rank " + std::to_string(failing) + " failed");
    }
  }
  // A broadcast whose root's group fails reaches the other group's ranks.
  auto outcomes = run_ranks(4, [&](std::size_t r) {
    auto x = tensor::zeros(dtype::f32, {4});
    auto o = options;
    if (r == 1)
      o.failure = std::make_exception_ptr(value_error("no value"));
    world.of(r).broadcast(r, 1, {&x, 1}, o);
  });
  for (const auto& o : outcomes)
    CHECK(o.what == "no value");
  // Usable again.
  std::vector<tensor> xs;
  for (std::size_t r = 0; r < 4; ++r)
    xs.push_back(tensor::filled(dtype::f32, {1000}, 1.0));
  check_all_ok(run_ranks(4, [&](std::size_t r) {
    world.of(r).all_reduce(r, reduce_op::mean, {&xs[r], 1}, {&xs[r], 1}, options);
  }));
  for (const auto& x : xs)
    CHECK(x == tensor::filled(dtype::f32, {1000}, 1.0));
}

TEST_CASE("hierarchical_communicator: ranks outside the group and bad parts are refused") {
  two_processes world;
  auto x = tensor::zeros(dtype::f32, {1});
  CHECK_THROWS_WITH_AS(world.of(0).all_reduce(2, reduce_op::sum, {&x, 1}, {&x, 1}, options),
                       "all_reduce in 'process 0 / leaders': rank 2 is not in group 0 (ranks 0, "
                       "1)",
                       value_error);
  CHECK_THROWS_AS(hierarchical_communicator(nullptr, world.leaders, 0), value_error);
  const auto two = std::make_shared<shm_communicator>(2, "x");
  CHECK_THROWS_WITH_AS(hierarchical_communicator(two, world.leaders, {{{0, 1}, {1, 2}}}, 0),
                       "hierarchical_communicator: the groups must hold each rank from 0 to 3 "
                       "once; rank 1 is in two groups",
                       value_error);
  CHECK_THROWS_WITH_AS(hierarchical_communicator(two, world.leaders, {{{0, 1}, {2}}}, 1),
                       "hierarchical_communicator: group 1 has 1 ranks but its local "
                       "communicator 2",
                       value_error);
  CHECK_THROWS_WITH_AS(hierarchical_communicator(two, world.leaders, {{{0, 1}}}, 0),
                       "hierarchical_communicator: 1 groups but 2 leaders", value_error);
  // A group's leader without the leaders' communicator cannot run the
  // leaders' stage.
  hierarchical_communicator leaderless{std::make_shared<shm_communicator>(1, "alone"), nullptr,
                                       {{{0}, {1}}}, 0};
  CHECK_THROWS_WITH_AS(leaderless.all_reduce(0, reduce_op::sum, {&x, 1}, {&x, 1}, options),
                       "hierarchical_communicator: group 0's leader has no leaders' "
                       "communicator here",
                       value_error);
  CHECK_THROWS_AS(hierarchical_communicator(std::make_shared<shm_communicator>(1, "x"),
                                            world.leaders, 2),
                  value_error);
}

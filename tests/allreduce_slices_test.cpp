// allreduce_slices, the in-process all-reduce on a collective_group,
// without CAF: every op, dtype, world size and element count against closed
// forms, element ranges, bit-identical floating results, and the checks of
// a rank's buffers before the rendezvous; each rank passes only its own
// buffers, on plain std::threads, so it also runs under ThreadSanitizer.
// (collective_group_test.cpp covers the rendezvous: mismatches, timeouts,
// cancellation, failures.)

#include "collectives/allreduce_slices.hpp"
#include "collectives/collective_group.hpp"

#include "lockstep/error.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

#include "rank_threads.hpp"
#include "reduce_values.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using namespace std::chrono_literals;

namespace {

struct sweep_case {
  reduce_op op;
  dtype type;
  std::int64_t count;
  std::size_t chunk_bytes;
  bool in_place;
  std::vector<tensor> inputs;  // one per rank
  std::vector<tensor> outputs; // one per rank
};

} // namespace

TEST_CASE("allreduce_slices: every op, dtype and size against closed forms") {
  const dtype types[] = {dtype::f32, dtype::f64, dtype::i32, dtype::i64};
  const reduce_op ops[] = {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                           reduce_op::prod};
  for (std::size_t n : {1u, 2u, 3u, 4u, 7u}) {
    // 997 with 64-byte chunks: many chunks per slice, not divisible by any n > 1;
    // 12343 with the default chunk: more than one default chunk for n = 1.
    const std::pair<std::int64_t, std::size_t> sizes[] = {
        {0, 0}, {1, 0}, {7, 0}, {static_cast<std::int64_t>(n) + 1, 0}, {997, 64}, {12343, 0}};
    std::vector<sweep_case> cases;
    for (auto [count, chunk_bytes] : sizes)
      for (auto type : types)
        for (auto op : ops)
          for (bool in_place : {false, true}) {
            sweep_case c{op, type, count, chunk_bytes, in_place, {}, {}};
            for (std::size_t r = 0; r < n; ++r) {
              c.inputs.push_back(
                  make_input(type, count, [&](std::size_t i) { return input_value(op, r, i); }));
              c.outputs.push_back(in_place ? c.inputs.back()
                                           : tensor::filled(type, {count}, -99.0));
            }
            cases.push_back(std::move(c));
          }

    collective_group group{n, "sweep"};
    auto outcomes = run_ranks(n, [&](std::size_t rank) {
      for (auto& c : cases)
        allreduce_slices(group, rank, c.op, c.inputs[rank], c.outputs[rank],
                         {.timeout = 20s, .tag = "", .chunk_bytes = c.chunk_bytes});
    });
    for (std::size_t rank = 0; rank < n; ++rank)
      CHECK_MESSAGE(outcomes[rank].kind.empty(), outcomes[rank].what);

    for (const auto& c : cases) {
      visit_dtype(c.type, [&]<class T>(T) {
        std::size_t wrong = 0;
        for (std::size_t r = 0; r < n; ++r) {
          const auto data = c.outputs[r].data<T>();
          for (std::size_t i = 0; i < data.size(); ++i)
            if (data[i] != expected_value<T>(c.op, n, i))
              ++wrong;
        }
        INFO("n=" << n << " op=" << to_string(c.op) << " dtype=" << to_string(c.type)
                  << " count=" << c.count << " chunk_bytes=" << c.chunk_bytes
                  << " in_place=" << c.in_place);
        CHECK(wrong == 0);
      });
    }
    CHECK(group.next_seq(0) == cases.size() + 1);
    CHECK(group.next_seq(n - 1) == cases.size() + 1);
  }
}

TEST_CASE("allreduce_slices: mean of integers truncates toward zero") {
  collective_group group{2, "mean"};
  std::vector<tensor> inputs{tensor::from<std::int32_t>({-7, 7, 3}),
                             tensor::from<std::int32_t>({0, 0, 0})};
  auto outcomes = run_ranks(2, [&](std::size_t rank) {
    allreduce_slices(group, rank, reduce_op::mean, inputs[rank], inputs[rank], {.timeout = 10s});
  });
  CHECK(outcomes[0].kind.empty());
  CHECK(outcomes[1].kind.empty());
  for (const auto& t : inputs)
    CHECK(t == tensor::from<std::int32_t>({-3, 3, 1}));
}

TEST_CASE("allreduce_slices: an element range reduces only those elements") {
  // Rank r holds r + 1 in each of 10 elements; [3, 8) is reduced, the rest
  // of the outputs keeps its -1.
  for (std::size_t n : {1u, 2u, 3u, 4u, 7u}) {
    collective_group group{n, "range"};
    std::vector<tensor> inputs, outputs;
    for (std::size_t r = 0; r < n; ++r) {
      inputs.push_back(tensor::filled(dtype::i64, {10}, static_cast<double>(r + 1)));
      outputs.push_back(tensor::filled(dtype::i64, {10}, -1.0));
    }
    auto outcomes = run_ranks(n, [&](std::size_t rank) {
      allreduce_slices(group, rank, reduce_op::sum,
                       allreduce_buffers{{&inputs[rank], 1}, {&outputs[rank], 1}, 3, 8},
                       {.timeout = 10s, .tag = "", .chunk_bytes = 8});
    });
    const auto total = static_cast<std::int64_t>(n * (n + 1) / 2);
    for (std::size_t r = 0; r < n; ++r) {
      CHECK_MESSAGE(outcomes[r].kind.empty(), outcomes[r].what);
      CHECK(outputs[r]
            == tensor::from<std::int64_t>({-1, -1, -1, total, total, total, total, total, -1, -1}));
    }
  }
}

TEST_CASE("allreduce_slices: floating results are bit-identical across runs and ranks") {
  for (std::size_t n : {2u, 3u, 4u, 7u})
    for (auto type : {dtype::f32, dtype::f64})
      for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::prod}) {
        // Values of mixed sign and magnitude, so the order of operations shows.
        std::vector<tensor> inputs;
        std::uint64_t state = 12345 + n;
        for (std::size_t r = 0; r < n; ++r)
          inputs.push_back(make_input(type, 997, [&](std::size_t i) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            const auto unit = static_cast<double>(state >> 11) / 9007199254740992.0;
            return op == reduce_op::prod ? 0.5 + unit : (unit - 0.5) * (i % 3 == 0 ? 1e6 : 1e-3);
          }));
        // The reference: the same fixed order, input 0 to input N-1, serially.
        tensor reference = inputs[0].copy();
        visit_dtype(type, [&]<class T>(T) {
          // (float16 and bfloat16 have no arithmetic; float16_test covers them.)
          if constexpr (!is_half_v<T>) {
            auto acc = reference.data<T>();
            for (std::size_t r = 1; r < n; ++r) {
              const auto x = inputs[r].data<T>();
              for (std::size_t i = 0; i < acc.size(); ++i)
                acc[i] = op == reduce_op::prod ? acc[i] * x[i] : acc[i] + x[i];
            }
            if (op == reduce_op::mean)
              for (auto& a : acc)
                a /= static_cast<T>(n);
          }
        });

        collective_group group{n, "bits"};
        for (int run = 0; run < 3; ++run) {
          std::vector<tensor> outputs;
          for (std::size_t r = 0; r < n; ++r)
            outputs.push_back(tensor::zeros(type, {997}));
          auto outcomes = run_ranks(n, [&](std::size_t rank) {
            allreduce_slices(group, rank, op, inputs[rank], outputs[rank],
                             {.timeout = 10s, .tag = "bits", .chunk_bytes = 96});
          });
          for (std::size_t r = 0; r < n; ++r) {
            CHECK(outcomes[r].kind.empty());
            CHECK(std::memcmp(outputs[r].raw_data(), reference.raw_data(), reference.byte_size())
                  == 0);
          }
        }
      }
}

TEST_CASE("allreduce_slices: a rank's invalid buffers are rejected before the rendezvous") {
  collective_group group{2, "args"};
  std::vector<tensor> two{tensor::from<float>({1, 2}), tensor::from<float>({3, 4})};
  std::vector<tensor> outputs{tensor::zeros(dtype::f32, {2}), tensor::zeros(dtype::f32, {2})};
  const collective_options options{.timeout = 1s};

  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 0, reduce_op::sum, allreduce_buffers{two, {outputs.data(), 1}},
                       options),
      "allreduce_slices in group 'args' (rank 0): expected as many outputs as inputs, got 2 "
      "inputs and 1 outputs",
      value_error);

  std::vector<tensor> mixed_types{two[0], tensor::from<double>({3, 4})};
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 1, reduce_op::sum, allreduce_buffers{mixed_types, outputs},
                       options),
      "allreduce_slices in group 'args' (rank 1): input 1 is float64, input 0 is float32",
      dtype_error);

  tensor f64_output = tensor::zeros(dtype::f64, {2});
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 0, reduce_op::sum, two[0], f64_output, options),
      "allreduce_slices in group 'args' (rank 0): output 0 is float64, its input is float32",
      dtype_error);

  tensor short_output = tensor::zeros(dtype::f32, {1});
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 1, reduce_op::sum, two[1], short_output, options),
      "allreduce_slices in group 'args' (rank 1): output 0 has 1 elements, its input has 2",
      value_error);

  std::vector<tensor> pack_outputs{outputs[0], tensor::zeros(dtype::f32, {3})};
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 0, reduce_op::sum, allreduce_buffers{two, pack_outputs}, options),
      "allreduce_slices in group 'args' (rank 0): output 1 has 3 elements, its input has 2",
      value_error);

  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 0, reduce_op::sum, allreduce_buffers{two, outputs, 0, 5}, options),
      "allreduce_slices in group 'args' (rank 0): element range [0, 5) is not within the 4 "
      "elements of the inputs",
      value_error);
  CHECK_THROWS_WITH_AS(
      allreduce_slices(group, 1, reduce_op::sum, allreduce_buffers{two, outputs, 3, 2}, options),
      "allreduce_slices in group 'args' (rank 1): element range [3, 2) is not within the 4 "
      "elements of the inputs",
      value_error);

  CHECK_THROWS_WITH_AS(allreduce_slices(group, 2, reduce_op::sum, two[0], outputs[0], options),
                       "allreduce_slices in group 'args' (rank 2): rank out of range for a "
                       "group of 2",
                       value_error);

  // Nothing reached the rendezvous: the first collective still works.
  CHECK(group.next_seq(0) == 1);
  CHECK(group.next_seq(1) == 1);
  auto outcomes = run_ranks(2, [&](std::size_t rank) {
    allreduce_slices(group, rank, reduce_op::sum, two[rank], outputs[rank], {.timeout = 10s});
  });
  CHECK(outcomes[0].kind.empty());
  CHECK(outcomes[1].kind.empty());
  CHECK(outputs[0] == tensor::from<float>({4, 6}));
  CHECK(outputs[1] == tensor::from<float>({4, 6}));
  CHECK(group.next_seq(0) == 2);
}

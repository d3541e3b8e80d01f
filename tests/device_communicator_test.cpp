// device_communicator on host memory (one memory domain, the host kind's
// reduce_buffers): replica threads meet in a collective group and one of
// them reduces every rank's buffers. The same code runs over the logical
// GPUs of one physical GPU (the gpu suite's strategy tests); here it runs
// on plain threads, so it also runs under ThreadSanitizer.

#include "communicators/device_communicator.hpp"

#include "cross_device_ops/replica_collectives.hpp"

#include "lockstep/cross_device_ops.hpp"
#include "lockstep/error.hpp"

#include "rank_threads.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <vector>

using namespace lockstep;
using lockstep::detail::collective_options;
using lockstep::detail::device_communicator;

namespace {

/// Rank r's tensor i: values that round in float32 and float16.
tensor input_of(dtype type, std::size_t rank, std::size_t i, std::int64_t count) {
  std::vector<double> values;
  for (std::int64_t k = 0; k < count; ++k)
    values.push_back(0.1 * static_cast<double>(rank + 1) + static_cast<double>(k % 7) * 1.37
                     - static_cast<double>(i));
  auto result = tensor::zeros(type, {count}, cpu_device(static_cast<int>(rank)));
  visit_dtype(type, [&]<class T>(T) {
    auto out = result.data<T>();
    for (std::int64_t k = 0; k < count; ++k)
      out[static_cast<std::size_t>(k)] = static_cast<T>(values[static_cast<std::size_t>(k)]);
  });
  return result;
}

bool same_bytes(const tensor& a, const tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape()
         && std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

collective_options quick(std::chrono::milliseconds timeout = std::chrono::seconds{20}) {
  return {.timeout = timeout, .tag = "test"};
}

} // namespace

TEST_CASE("all_reduce: every rank gets the reduction_to_one_device result, bit for bit") {
  for (std::size_t n : {1, 2, 3, 4, 7})
    for (auto type : {dtype::f32, dtype::f64, dtype::i32, dtype::f16, dtype::bf16})
      for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::max, reduce_op::prod}) {
        CAPTURE(n);
        CAPTURE(to_string(type));
        CAPTURE(to_string(op));
        device_communicator communicator{n, "test"};
        constexpr std::size_t tensors = 3;
        const std::int64_t counts[tensors] = {0, 1, 65};
        std::vector<std::vector<tensor>> inputs(n), outputs(n);
        for (std::size_t r = 0; r < n; ++r)
          for (std::size_t i = 0; i < tensors; ++i) {
            inputs[r].push_back(input_of(type, r, i, counts[i]));
            // The last tensor is reduced in place: its output is its input.
            outputs[r].push_back(i + 1 == tensors
                                   ? inputs[r][i]
                                   : tensor::uninitialized(type, {counts[i]}, cpu_device(static_cast<int>(r))));
          }
        std::vector<tensor> expected;
        for (std::size_t i = 0; i < tensors; ++i) {
          std::vector<tensor> components;
          for (std::size_t r = 0; r < n; ++r)
            components.push_back(input_of(type, r, i, counts[i]));
          expected.push_back(
            reduction_to_one_device{}.reduce(op, per_replica<tensor>{components}, "/cpu:0")[0]);
        }
        const auto outcomes = run_ranks(n, [&](std::size_t r) {
          communicator.all_reduce(r, op, inputs[r], outputs[r], quick());
        });
        for (std::size_t r = 0; r < n; ++r) {
          CHECK(outcomes[r].what == "");
          for (std::size_t i = 0; i < tensors; ++i)
            CHECK(same_bytes(outputs[r][i], expected[i]));
        }
        CHECK(contains(communicator.session().dump(), "all_reduce"));
      }
}

TEST_CASE("all_reduce: replicas that disagree all throw, naming what each issued") {
  device_communicator communicator{2, "test"};
  std::vector<tensor> outputs(2);
  const auto outcomes = run_ranks(2, [&](std::size_t r) {
    const auto x = tensor::zeros(dtype::f32, {r == 0 ? 4 : 5}, cpu_device(static_cast<int>(r)));
    outputs[r] = tensor::uninitialized(dtype::f32, x.shape(), x.device());
    communicator.all_reduce(r, reduce_op::sum, {&x, 1}, {&outputs[r], 1}, quick());
  });
  for (const auto& o : outcomes) {
    CHECK(o.kind == "shape_error");
    CHECK(contains(o.what, "[4]"));
    CHECK(contains(o.what, "[5]"));
  }
}

TEST_CASE("all_reduce: a replica that never comes is a timeout_error naming it") {
  device_communicator communicator{2, "test"};
  const auto x = tensor::zeros(dtype::f32, {4}, cpu_device(0));
  auto out = tensor::uninitialized(dtype::f32, {4}, cpu_device(0));
  const auto outcomes = run_ranks(1, [&](std::size_t) {
    communicator.all_reduce(0, reduce_op::sum, {&x, 1}, {&out, 1},
                            quick(std::chrono::milliseconds{100}));
  });
  CHECK(outcomes[0].kind == "timeout_error");
  CHECK(contains(outcomes[0].what, "replica 1"));
  CHECK(contains(communicator.session().dump(), "all_reduce"));
}

TEST_CASE("broadcast and all_gather copy between the ranks' buffers") {
  constexpr std::size_t n = 3;
  device_communicator communicator{n, "test"};
  std::vector<tensor> buffers(n), gathered(n);
  const auto outcomes = run_ranks(n, [&](std::size_t r) {
    const auto here = cpu_device(static_cast<int>(r));
    buffers[r] = tensor::filled(dtype::i32, {3}, static_cast<double>(r + 10), here);
    communicator.broadcast(r, 2, {&buffers[r], 1}, quick());
    const auto mine = tensor::filled(dtype::i64, {2}, static_cast<double>(r), here);
    gathered[r] = tensor::zeros(dtype::i64, {6}, here);
    communicator.all_gather(r, mine, gathered[r], quick());
  });
  for (std::size_t r = 0; r < n; ++r) {
    CHECK(outcomes[r].what == "");
    CHECK(buffers[r] == tensor::filled(dtype::i32, {3}, 12, cpu_device(0)));
    CHECK(gathered[r] == tensor::from<std::int64_t>({0, 0, 1, 1, 2, 2}, {6}, cpu_device(0)));
  }
}

TEST_CASE("reduce_scatter is not a collective of the device communicator") {
  device_communicator communicator{1, "gpus"};
  const auto x = tensor::zeros(dtype::f32, {4}, cpu_device(0));
  auto out = tensor::zeros(dtype::f32, {4}, cpu_device(0));
  try {
    communicator.reduce_scatter(0, reduce_op::sum, x, out, quick());
    FAIL("no error");
  } catch (const device_error& e) {
    CHECK(contains(e.what(), "reduce_scatter"));
    CHECK(contains(e.what(), "device communicator"));
  }
}

TEST_CASE("on_device_all_reduce gives a strategy's replicas a device communicator where one "
          "memory holds them all") {
  on_device_all_reduce ops;
  const auto collectives =
    detail::cross_device_ops_access::of(ops, cpu_devices(3), "strategy 7");
  REQUIRE(collectives.communicator != nullptr);
  CHECK(collectives.communicator->name() == "strategy 7");
  CHECK(collectives.communicator->size() == 3);
  CHECK(collectives.defaults.tag == "strategy 7");
  // The slice algorithm keeps its own communicator; reduction_to_one_device
  // has none (merge_call).
  CHECK(detail::cross_device_ops_access::of(reduction_to_one_device{}, cpu_devices(3), "s")
          .communicator
        == nullptr);
}

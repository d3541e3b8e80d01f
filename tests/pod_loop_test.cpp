// The pod strategy's rules inside its replicated computation and its host
// loops, on the virtual CPU devices of one process: TF's TPU reduction rule
// (SUM and MEAN only inside `run`), host loops of 1, 5 and 20 steps per
// call against one step per call, the outputs of a loop, and TF's
// static-shape error for batches that may be partial (the mirrored
// strategies take them).

#include "lockstep/lockstep.hpp"

#include "test_support.hpp"

#include "pod_support.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

using namespace lockstep;

namespace {

const std::string only_sum_and_mean = "Currently only support sum & mean in pod_strategy.";

const std::string static_shapes =
  "pod currently requires fully defined shapes. Either use set_shape() on the input tensors "
  "or use dataset.batch(..., drop_remainder=True).";

/// 3 replicas on 3 virtual CPU devices; replica r holds r-th of {1, 2, 4}:
/// their mean 7 / 3 in float is 2.33333325, while 7 * (1 / 3) (TF's way)
/// is 2.33333349, so an exact mean is told apart.
pod_strategy three_replicas() {
  return pod_strategy{pod_topology::from_devices(cpu_devices(3))};
}

tensor replica_value(const replica_context& ctx) {
  const float values[] = {1.0f, 2.0f, 4.0f};
  return tensor::scalar(values[ctx.replica_id_in_sync_group()]);
}

/// The expected reduction of {1, 2, 4}.
float expected(reduce_op op) {
  switch (op) {
  case reduce_op::sum: return 7.0f;
  case reduce_op::mean: return 7.0f / 3.0f;
  case reduce_op::min: return 1.0f;
  case reduce_op::max: return 4.0f;
  case reduce_op::prod: return 8.0f;
  }
  return 0;
}

const std::vector<reduce_op> refused_ops{reduce_op::min, reduce_op::max, reduce_op::prod};

/// Rows of 3 features and a target, deterministic: `rows` rows.
dataset<tensor> regression_rows(std::int64_t rows) {
  std::vector<float> values;
  for (std::int64_t i = 0; i < rows; ++i) {
    const float x0 = static_cast<float>(i % 7) / 7.0f - 0.5f;
    const float x1 = static_cast<float>(i % 5) / 5.0f - 0.4f;
    const float x2 = static_cast<float>(i % 3) / 3.0f - 0.3f;
    values.insert(values.end(), {x0, x1, x2, 1.5f * x0 - 2.0f * x1 + 0.5f * x2});
  }
  return dataset<tensor>::from_tensor_slices(tensor::from(values, {rows, 4}));
}

/// One step of gradient descent on the mean squared error of `w` over the
/// replica's `rows`: the gradient through the MEAN-aggregated weights (a
/// mirrored write inside `run`), and the replica's loss.
float descend(variable& w, const tensor& rows) {
  const auto weights = floats(w.read_value());
  std::vector<float> dw(3, 0.0f);
  float loss = 0;
  const auto n = rows.shape()[0];
  const auto data = rows.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto* row = data.data() + 4 * i;
    const float error = weights[0] * row[0] + weights[1] * row[1] + weights[2] * row[2] - row[3];
    loss += error * error / static_cast<float>(n);
    for (std::size_t k = 0; k < 3; ++k)
      dw[k] += 2.0f * error * row[k] / static_cast<float>(n);
  }
  w.assign_sub(tensor::from<float>({0.3f * dw[0], 0.3f * dw[1], 0.3f * dw[2]}));
  return loss;
}

/// What a training run leaves: every copy of the weights, the last step's
/// mean loss, and how many dispatches (calls) it took.
struct trained {
  std::vector<std::vector<float>> weights;
  float last_loss = 0;
  int calls = 0;
};

constexpr std::int64_t training_steps = 20;

/// 20 steps of 8 rows on a pod of 4 replicas, one `run` per step.
trained one_step_per_call(const pod_strategy& pod) {
  auto scope = pod.scope();
  variable w{tensor::from<float>({0, 0, 0}), {.aggregation = variable_aggregation::mean}};
  trained out;
  auto it = pod.experimental_distribute_dataset(regression_rows(8 * training_steps).batch(8, true))
              .make_iterator();
  while (auto batch = it.next()) {
    const auto losses = pod.run(
      [&](replica_context&, const tensor& rows) { return tensor::scalar(descend(w, rows)); },
      *batch);
    out.last_loss = pod.reduce(reduce_op::mean, losses).at<float>(0);
    ++out.calls;
  }
  for (const auto& copy : w.values())
    out.weights.push_back(floats(copy.read_value()));
  return out;
}

/// The same 20 steps as host loops of `per_call` steps (`iterations`
/// given, or the pod's steps_per_run when `per_call` is 0).
trained host_loops(const pod_strategy& pod, std::size_t per_call) {
  auto scope = pod.scope();
  variable w{tensor::from<float>({0, 0, 0}), {.aggregation = variable_aggregation::mean}};
  trained out;
  auto it = pod.experimental_distribute_dataset(regression_rows(8 * training_steps).batch(8, true))
              .make_iterator();
  auto step = [&](multi_step_context& loop, const tensor& rows) {
    loop.set_last_step_output("loss", tensor::scalar(descend(w, rows)), reduce_op::mean);
  };
  for (;;) {
    auto loop = per_call == 0 ? pod.extended().experimental_run_steps_on_iterator(step, it)
                              : pod.extended().experimental_run_steps_on_iterator(step, it,
                                                                                  per_call);
    if (loop.steps() == 0)
      break;
    ++out.calls;
    out.last_loss = std::get<tensor>(loop.last_step_outputs().at("loss")).at<float>(0);
  }
  for (const auto& copy : w.values())
    out.weights.push_back(floats(copy.read_value()));
  return out;
}

} // namespace

TEST_CASE("inside run the pod reduces with SUM and MEAN only: TF's error for MIN, MAX, PROD") {
  auto pod = three_replicas();
  auto scope = pod.scope();
  SUBCASE("replica_context::all_reduce") {
    for (auto op : {reduce_op::sum, reduce_op::mean}) {
      const auto out = pod.run([&](replica_context& ctx) {
        return ctx.all_reduce(op, replica_value(ctx));
      });
      for (const auto& x : out.values())
        CHECK(x.at<float>(0) == expected(op));
    }
    for (auto op : refused_ops) {
      CAPTURE(to_string(op));
      CHECK(error_of<context_error>([&] {
              (void) pod.run([&](replica_context& ctx) {
                return ctx.all_reduce(op, replica_value(ctx));
              });
            })
            == only_sum_and_mean);
    }
  }
  SUBCASE("reduce_to, batch_reduce_to and strategy::reduce in a merge function") {
    auto merged = [&](reduce_op op, int how) {
      return pod.run([&, op, how](replica_context& ctx) {
        return ctx.merge_call([op, how](strategy& s, const per_replica<tensor>& v) {
          switch (how) {
          case 0: return s.extended().reduce_to(op, v, v).primary();
          case 1: return s.extended().batch_reduce_to(op, {{v, v}}).at(0).primary();
          case 2: return s.reduce(op, v);
          default: return s.extended().reduce_to(op, tensor::scalar(1.0f), v).primary();
          }
        }, replica_value(ctx));
      });
    };
    for (int how = 0; how < 3; ++how) {
      CAPTURE(how);
      for (auto op : {reduce_op::sum, reduce_op::mean})
        CHECK(merged(op, how).primary().at<float>(0) == expected(op));
      for (auto op : refused_ops) {
        CAPTURE(to_string(op));
        CHECK(error_of<context_error>([&] { (void) merged(op, how); }) == only_sum_and_mean);
      }
    }
    // A plain tensor too (TF's rule covers tensors inside its computation).
    CHECK(merged(reduce_op::mean, 3).primary().at<float>(0) == 1.0f);
    CHECK(error_of<context_error>([&] { (void) merged(reduce_op::max, 3); })
          == only_sum_and_mean);
  }
  // The strategy stays usable after the refusals.
  const auto after = pod.run([](replica_context& ctx) {
    return ctx.all_reduce(reduce_op::sum, replica_value(ctx));
  });
  CHECK(after.primary().at<float>(0) == 7.0f);
}

TEST_CASE("outside run every op reduces a per-replica value on the pod") {
  auto pod = three_replicas();
  auto scope = pod.scope();
  const auto values = pod.run([](replica_context& ctx) { return replica_value(ctx); });
  const auto& ext = pod.extended();
  for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                  reduce_op::prod}) {
    CAPTURE(to_string(op));
    CHECK(ext.reduce_to(op, values, cpu_device(1)).primary().at<float>(0) == expected(op));
    CHECK(ext.batch_reduce_to(op, {{values, cpu_device(0)}}).at(0).primary().at<float>(0)
          == expected(op));
    CHECK(pod.reduce(op, values).at<float>(0) == expected(op));
  }
  // The exact mean: 7 / 3, not 7 * (1 / 3).
  CHECK(pod.reduce(reduce_op::mean, values).at<float>(0) == 7.0f / 3.0f);
  // A plain tensor outside run: TF's non-distributed rules, MAX included.
  CHECK(ext.reduce_to(reduce_op::max, tensor::scalar(2.0f), cpu_device(0)).primary().at<float>(0)
        == 2.0f);
}

TEST_CASE("the rule is the pod's: mirrored_strategy reduces with every op inside run") {
  mirrored_strategy mirrored{cpu_devices(3)};
  for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                  reduce_op::prod}) {
    CAPTURE(to_string(op));
    const auto out = mirrored.run([&](replica_context& ctx) {
      return ctx.all_reduce(op, replica_value(ctx));
    });
    for (const auto& x : out.values())
      CHECK(x.at<float>(0) == expected(op));
  }
}

TEST_CASE("host loops of 1, 5 and 20 steps per call train exactly as one step per call") {
  pod_strategy reference_pod{pod_topology::from_devices(cpu_devices(4))};
  const auto reference = one_step_per_call(reference_pod);
  REQUIRE(reference.calls == training_steps);
  REQUIRE(reference.weights.size() == 4);
  for (const auto& copy : reference.weights)
    CHECK(copy == reference.weights[0]);
  CHECK(reference.weights[0] != std::vector<float>{0, 0, 0});
  for (std::size_t per_call : {1, 5, 20}) {
    CAPTURE(per_call);
    // iterations given
    pod_strategy pod{pod_topology::from_devices(cpu_devices(4))};
    const auto looped = host_loops(pod, per_call);
    CHECK(looped.calls == static_cast<int>(training_steps) / static_cast<int>(per_call));
    CHECK(looped.weights == reference.weights);
    CHECK(looped.last_loss == reference.last_loss);
    // iterations from steps_per_run
    pod_strategy by_default{pod_topology::from_devices(cpu_devices(4)), std::nullopt,
                            {.steps_per_run = per_call}};
    const auto defaulted = host_loops(by_default, 0);
    CHECK(defaulted.calls == looped.calls);
    CHECK(defaulted.weights == reference.weights);
    CHECK(defaulted.last_loss == reference.last_loss);
  }
}

TEST_CASE("a host loop's outputs: reduced ones are one tensor, the others one value per replica") {
  auto pod = three_replicas();
  auto scope = pod.scope();
  auto it = pod.experimental_distribute_dataset(
                 dataset<tensor>::from_tensor_slices(tensor::from<float>({1, 2, 4, 1, 2, 4}))
                   .batch(3, true))
              .make_iterator();
  auto loop = pod.extended().experimental_run_steps_on_iterator(
    [](replica_context& ctx, multi_step_context& out, const tensor& mine) {
      out.set_last_step_output("sum", mine.reshaped({}), reduce_op::sum);
      out.set_last_step_output("mean", mine.reshaped({}), reduce_op::mean);
      out.set_non_tensor_output("replica", ctx.replica_id_in_sync_group());
      ctx.merge_call([&out](strategy&, const per_replica<tensor>& v) {
        out.set_last_step_output("each", v); // cross-replica, no op: kept per replica
      }, mine.reshaped({}));
    },
    it, 2);
  CHECK(loop.steps() == 2);
  const auto& outputs = loop.last_step_outputs();
  REQUIRE(outputs.size() == 3);
  CHECK(std::get<tensor>(outputs.at("sum")).at<float>(0) == 7.0f);
  CHECK(std::get<tensor>(outputs.at("mean")).at<float>(0) == 7.0f / 3.0f);
  const auto& each = std::get<per_replica<tensor>>(outputs.at("each"));
  REQUIRE(each.size() == 3);
  for (std::size_t r = 0; r < 3; ++r)
    CHECK(each[r].at<float>(0) == std::vector<float>{1, 2, 4}[r]);
  const auto& replicas = loop.non_tensor_outputs().at("replica");
  REQUIRE(replicas.size() == 3);
  for (std::size_t r = 0; r < 3; ++r)
    CHECK(std::any_cast<std::size_t>(replicas[r]) == r);
}

TEST_CASE("a host loop's outputs set in replica context reduce with SUM and MEAN only on the pod") {
  auto data = dataset<tensor>::from_tensor_slices(tensor::from<float>({1, 2, 4})).batch(3, true);
  auto pod = three_replicas();
  for (auto op : refused_ops) {
    CAPTURE(to_string(op));
    auto it = pod.experimental_distribute_dataset(data).make_iterator();
    CHECK(error_of<context_error>([&] {
            (void) pod.extended().experimental_run_steps_on_iterator(
              [op](multi_step_context& out, const tensor& mine) {
                out.set_last_step_output("x", mine.reshaped({}), op);
              },
              it, 1);
          })
          == only_sum_and_mean);
  }
  // mirrored_strategy reduces them (its reduction runs after the loop).
  mirrored_strategy mirrored{cpu_devices(3)};
  auto it = mirrored.experimental_distribute_dataset(data).make_iterator();
  auto loop = mirrored.extended().experimental_run_steps_on_iterator(
    [](multi_step_context& out, const tensor& mine) {
      out.set_last_step_output("x", mine.reshaped({}), reduce_op::max);
    },
    it, 1);
  CHECK(std::get<tensor>(loop.last_step_outputs().at("x")).at<float>(0) == 4.0f);
}

TEST_CASE("the pod's host loops need static shapes: TF's error for batches that may be partial") {
  pod_strategy pod{pod_topology::from_devices(cpu_devices(2))};
  auto scope = pod.scope();
  int steps_run = 0;
  auto step = [&steps_run](replica_context& ctx, multi_step_context&, const tensor&) {
    ctx.merge_call([&steps_run](strategy&) { ++steps_run; });
  };
  SUBCASE("a final partial batch (10 rows in batches of 4, without drop_remainder)") {
    auto it = pod.experimental_distribute_dataset(regression_rows(10).batch(4)).make_iterator();
    CHECK(error_of<value_error>([&] {
            (void) pod.extended().experimental_run_steps_on_iterator(step, it, 5);
          })
          == static_shapes);
    CHECK(error_of<value_error>([&] {
            (void) pod.extended().experimental_run_steps_on_iterator(step, it);
          })
          == static_shapes);
    // Raised before the loop: no step ran and none was taken.
    CHECK(steps_run == 0);
    auto first = it.next();
    REQUIRE(first);
    CHECK(first->primary().shape()[0] == 2);
  }
  SUBCASE("batches that happen to be full: the shape is still not static (as in TF)") {
    auto it = pod.experimental_distribute_dataset(regression_rows(8).batch(4)).make_iterator();
    CHECK(error_of<value_error>([&] {
            (void) pod.extended().experimental_run_steps_on_iterator(step, it, 2);
          })
          == static_shapes);
  }
  SUBCASE("drop_remainder: the partial batch is dropped and the loop runs") {
    auto it = pod.experimental_distribute_dataset(regression_rows(10).batch(4, true).shuffle(4, 7))
                .make_iterator();
    CHECK(pod.extended().experimental_run_steps_on_iterator(step, it, 5).steps() == 2);
    CHECK(steps_run == 2);
  }
}

TEST_CASE("the mirrored strategies keep taking a final partial batch in their loops") {
  auto check = [](const strategy& s) {
    auto it = s.experimental_distribute_dataset(regression_rows(10).batch(4)).make_iterator();
    auto loop = s.extended().experimental_run_steps_on_iterator(
      [](multi_step_context& out, const tensor& mine) {
        out.set_last_step_output("rows", tensor::scalar(static_cast<float>(mine.shape()[0])),
                                 reduce_op::sum);
      },
      it, 5);
    CHECK(loop.steps() == 3);
    CHECK(std::get<tensor>(loop.last_step_outputs().at("rows")).at<float>(0) == 2.0f);
  };
  check(mirrored_strategy{cpu_devices(2)});
  check(get_strategy());
}

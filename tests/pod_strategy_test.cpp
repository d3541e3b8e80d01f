// pod_strategy (TF's TPUStrategy) on the virtual CPU devices of one
// process: training against mirrored_strategy over the same devices in the
// assignment's order, placement by custom device assignments, TF's
// TPUStrategy properties and rules, and every error.

#include "lockstep/lockstep.hpp"

#include "test_support.hpp"

#include "pod_support.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace lockstep;

namespace {

pod_topology four_devices() {
  return pod_topology::from_devices(cpu_devices(4));
}

/// Rows of 3 features and a target y = 1.5 x0 - 2 x1 + 0.5 x2 + noise,
/// deterministic: 8 steps of 8 rows.
dataset<tensor> regression_rows() {
  std::vector<float> values;
  for (int i = 0; i < 64; ++i) {
    const float x0 = static_cast<float>(i % 7) / 7.0f - 0.5f;
    const float x1 = static_cast<float>(i % 5) / 5.0f - 0.4f;
    const float x2 = static_cast<float>(i % 3) / 3.0f - 0.3f;
    const float noise = static_cast<float>(i % 4) * 0.01f;
    values.insert(values.end(), {x0, x1, x2, 1.5f * x0 - 2.0f * x1 + 0.5f * x2 + noise});
  }
  return dataset<tensor>::from_tensor_slices(tensor::from(values, {64, 4})).batch(8, true);
}

/// The gradient of the mean squared error of w over `rows` ([n, 4]: 3
/// features, then the target), and the loss.
struct gradient {
  std::vector<float> dw;
  float loss = 0;
};

gradient mse_gradient(const std::vector<float>& w, const tensor& rows) {
  gradient g{{0, 0, 0}, 0};
  const auto n = rows.shape()[0];
  const auto data = rows.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto* row = data.data() + 4 * i;
    const float error = w[0] * row[0] + w[1] * row[1] + w[2] * row[2] - row[3];
    g.loss += error * error / static_cast<float>(n);
    for (std::size_t k = 0; k < 3; ++k)
      g.dw[k] += 2.0f * error * row[k] / static_cast<float>(n);
  }
  return g;
}

/// What a training run leaves: every copy of the weights, the loss of each
/// step (all_reduce MEAN), and the steps a merge_call counted.
struct trained {
  std::vector<std::vector<float>> weights;
  std::vector<float> losses;
  float counted_steps = 0;
};

/// 8 steps of gradient descent on `s`: each replica computes its
/// gradient, all_reduces its loss, writes the mean gradient step through
/// the MEAN-aggregated weights (merge_call and reduce_to onto every copy),
/// and counts the step in a merge_call that updates a mirrored counter.
trained train(const strategy& s) {
  auto scope = s.scope();
  variable w{tensor::from<float>({0, 0, 0}),
             {.name = "w", .aggregation = variable_aggregation::mean}};
  variable steps{tensor::scalar(0.0f), {.name = "steps"}};
  trained out;
  auto it = s.experimental_distribute_dataset(regression_rows()).make_iterator();
  while (auto batch = it.next()) {
    auto losses = s.run(
      [&](replica_context& ctx, const tensor& rows) {
        const auto g = mse_gradient(floats(w.read_value()), rows);
        const auto loss = ctx.all_reduce(reduce_op::mean, tensor::scalar(g.loss));
        w.assign_sub(tensor::from<float>({0.5f * g.dw[0], 0.5f * g.dw[1], 0.5f * g.dw[2]}));
        ctx.merge_call([&](strategy& st) {
          st.extended().update(steps, [](tensor& v) { v.data<float>()[0] += 1.0f; });
        });
        return loss;
      },
      *batch);
    for (const auto& loss : losses.values())
      CHECK(loss.at<float>(0) == losses.primary().at<float>(0));
    out.losses.push_back(losses.primary().at<float>(0));
  }
  for (const auto& copy : w.values())
    out.weights.push_back(floats(copy.read_value()));
  out.counted_steps = steps.read_value().at<float>(0);
  return out;
}

/// The same training on the calling thread: each step's gradient is the
/// mean of the 4 replicas' gradients over their 2 rows.
trained train_by_hand() {
  trained out;
  std::vector<float> w{0, 0, 0};
  auto it = regression_rows().make_iterator();
  while (auto batch = it.next()) {
    std::vector<float> mean_dw{0, 0, 0};
    float loss = 0;
    const auto all = batch->data<float>();
    for (std::size_t r = 0; r < 4; ++r) {
      std::vector<float> rows(all.begin() + 8 * r, all.begin() + 8 * (r + 1));
      const auto g = mse_gradient(w, tensor::from(rows, {2, 4}));
      loss += g.loss / 4;
      for (std::size_t k = 0; k < 3; ++k)
        mean_dw[k] += g.dw[k] / 4;
    }
    for (std::size_t k = 0; k < 3; ++k)
      w[k] -= 0.5f * mean_dw[k];
    out.losses.push_back(loss);
  }
  out.weights.assign(4, w);
  out.counted_steps = 8;
  return out;
}

/// The device each replica's function runs on, in replica order.
std::vector<device_spec> replica_devices_of(const strategy& s) {
  return s.run([](replica_context& ctx) {
            CHECK(ctx.devices() == std::vector<device_spec>{current_device()});
            return tensor::scalar(1.0f).device();
          })
    .values();
}

} // namespace

TEST_CASE("pod_strategy trains exactly as mirrored_strategy over the assignment's devices") {
  const auto topology = four_devices();
  auto check = [&](const pod_strategy& pod) {
    std::vector<device_spec> order;
    for (std::size_t r = 0; r < pod.device_assignment().num_replicas(); ++r)
      order.push_back(pod.device_assignment().device(r, 0));
    const auto on_pod = train(pod);
    const auto on_mirrored = train(mirrored_strategy{order});
    CHECK(on_pod.weights == on_mirrored.weights);
    CHECK(on_pod.losses == on_mirrored.losses);
    CHECK(on_pod.counted_steps == 8.0f);
    CHECK(on_mirrored.counted_steps == 8.0f);
    // Against the same steps on one thread (up to the order of additions).
    const auto by_hand = train_by_hand();
    REQUIRE(on_pod.losses.size() == by_hand.losses.size());
    for (std::size_t i = 0; i < by_hand.losses.size(); ++i)
      CHECK(on_pod.losses[i] == doctest::Approx(by_hand.losses[i]).epsilon(1e-5));
    for (const auto& copy : on_pod.weights)
      for (std::size_t k = 0; k < 3; ++k)
        CHECK(copy[k] == doctest::Approx(by_hand.weights[0][k]).epsilon(1e-5));
    CHECK(on_pod.losses.back() < on_pod.losses.front() / 2);
  };
  SUBCASE("the default assignment: one replica per device") {
    check(pod_strategy{topology});
  }
  SUBCASE("a custom assignment: replicas in ring order, devices 0, 2, 3, 1") {
    check(pod_strategy{topology, device_assignment{topology, {{{0, 0, 0, 0}},
                                                              {{1, 0, 0, 0}},
                                                              {{1, 0, 0, 1}},
                                                              {{0, 0, 0, 1}}}}});
  }
}

TEST_CASE("replica r runs on device_assignment().device(r, 0)") {
  const auto topology = four_devices();
  SUBCASE("the default: TF's grid on the host mesh [2, 1, 1, 2], devices in order") {
    pod_strategy pod{topology};
    CHECK(pod.device_assignment()
          == device_assignment::build(topology, {1, 1, 1, 1}, {1, 1, 1, 1}, 4));
    CHECK(replica_devices_of(pod) == canonical_cpus({0, 1, 2, 3}));
  }
  SUBCASE("replicas in ring order") {
    pod_strategy pod{topology, device_assignment{topology, {{{0, 0, 0, 0}},
                                                            {{1, 0, 0, 0}},
                                                            {{1, 0, 0, 1}},
                                                            {{0, 0, 0, 1}}}}};
    CHECK(replica_devices_of(pod) == canonical_cpus({0, 2, 3, 1}));
    CHECK(pod.extended().worker_devices() == canonical_cpus({0, 2, 3, 1}));
  }
  SUBCASE("2 replicas two chips apart along x, on the second core: devices 3 and 1") {
    pod_strategy pod{topology, device_assignment{topology, {{{1, 0, 0, 1}}, {{0, 0, 0, 1}}}}};
    CHECK(pod.num_replicas_in_sync() == 2);
    CHECK(replica_devices_of(pod) == canonical_cpus({3, 1}));
  }
  SUBCASE("2 replicas built with a stride of 2 along x: TF's grid (1, 1, 1, 2) puts them on "
          "the two cores of chip 0") {
    pod_strategy pod{topology,
                     device_assignment::build(topology, {1, 1, 1, 1}, {2, 1, 1, 1}, 2)};
    CHECK(replica_devices_of(pod) == canonical_cpus({0, 1}));
  }
  SUBCASE("3 replicas on the odd mesh of 3 devices [3, 1, 1, 1]") {
    const auto three = pod_topology::from_devices(cpu_devices(3));
    pod_strategy pod{three};
    CHECK(pod.num_replicas_per_host() == 3);
    CHECK(replica_devices_of(pod) == canonical_cpus({0, 1, 2}));
  }
}

TEST_CASE("TF's TPUStrategy properties") {
  const auto topology = four_devices();
  SUBCASE("the default assignment") {
    pod_strategy pod{topology};
    CHECK(pod.num_hosts() == 1);
    CHECK(pod.num_replicas_per_host() == 4);
    CHECK(pod.num_replicas_in_sync() == 4);
    CHECK(pod.steps_per_run() == 1);
    const auto& ext = pod.extended();
    CHECK(ext.steps_per_run() == 1);
    CHECK(ext.worker_devices() == canonical_cpus({0, 1, 2, 3}));
    CHECK(ext.parameter_devices() == ext.worker_devices());
    CHECK_FALSE(ext.experimental_between_graph());
    CHECK(ext.experimental_should_init());
    CHECK(ext.should_checkpoint());
    CHECK(ext.should_save_summary());
    CHECK(pod.to_string()
          == "pod_strategy(/job:localhost/replica:0/task:0/device:CPU:0, "
             "/job:localhost/replica:0/task:0/device:CPU:1, "
             "/job:localhost/replica:0/task:0/device:CPU:2, "
             "/job:localhost/replica:0/task:0/device:CPU:3)");
  }
  SUBCASE("2 replicas: per host, the replicas there; steps_per_run as set") {
    pod_strategy pod{topology, device_assignment{topology, {{{1, 0, 0, 1}}, {{0, 0, 0, 1}}}},
                     {.steps_per_run = 5}};
    CHECK(pod.num_hosts() == 1);
    CHECK(pod.num_replicas_per_host() == 2);
    CHECK(pod.steps_per_run() == 5);
    CHECK(pod.extended().steps_per_run() == 5);
    CHECK(pod.extended().parameter_devices() == canonical_cpus({3, 1}));
  }
  SUBCASE("the other strategies' steps_per_run is TF's default iterations, 1") {
    CHECK(mirrored_strategy{cpu_devices(2)}.extended().steps_per_run() == 1);
    CHECK(get_strategy().extended().steps_per_run() == 1);
  }
}

TEST_CASE("non_slot_devices is the host; update_non_slot runs there once") {
  const std::vector<device_spec> host{
    device_spec::parse("/job:localhost/replica:0/task:0/device:CPU:0")};
  {
    // The host of replica 0's device, whatever devices the replicas run on.
    pod_strategy elsewhere{four_devices(), device_assignment{four_devices(), {{{1, 0, 0, 1}}}}};
    CHECK(elsewhere.extended().worker_devices() == canonical_cpus({3}));
    CHECK(elsewhere.extended().non_slot_devices({}) == host);
    auto scope = elsewhere.scope();
    variable counter{tensor::scalar(0.0f)};
    elsewhere.extended().update_non_slot(host, [&] {
      CHECK(current_device() == host[0]);
      counter.assign_add(tensor::scalar(1.0f));
    });
    CHECK(counter.read_value().at<float>(0) == 1.0f);
  }
  pod_strategy pod{four_devices()};
  auto scope = pod.scope();
  variable counter{tensor::scalar(0.0f)};
  const auto& ext = pod.extended();
  const auto devices = ext.non_slot_devices({counter});
  CHECK(devices == host);
  int calls = 0;
  ext.update_non_slot(devices, [&] {
    ++calls;
    CHECK(current_device() == host[0]);
  });
  CHECK(calls == 1);
}

TEST_CASE("host loops take steps_per_run steps when the call gives none") {
  pod_strategy pod{four_devices(), std::nullopt, {.steps_per_run = 3}};
  auto it = pod.experimental_distribute_dataset(regression_rows().take(5)).make_iterator();
  int calls = 0;
  auto step = [&](replica_context& ctx, multi_step_context& loop, const tensor& rows) {
    ctx.merge_call([&](strategy&) { ++calls; });
    loop.set_last_step_output("rows", tensor::scalar(static_cast<float>(rows.shape()[0])),
                              reduce_op::sum);
  };
  auto first = pod.extended().experimental_run_steps_on_iterator(step, it);
  CHECK(first.steps() == 3);
  CHECK(std::get<tensor>(first.last_step_outputs().at("rows")).at<float>(0) == 8.0f);
  auto second = pod.extended().experimental_run_steps_on_iterator(step, it);
  CHECK(second.steps() == 2);
  CHECK(calls == 5);
  // An explicit count still wins.
  auto again = pod.experimental_distribute_dataset(regression_rows()).make_iterator();
  CHECK(pod.extended().experimental_run_steps_on_iterator(step, again, 1).steps() == 1);
}

TEST_CASE("reductions outside run go to one device: TF's error for several") {
  pod_strategy pod{four_devices()};
  auto scope = pod.scope();
  const auto values = pod.run([](replica_context& ctx) {
    return tensor::scalar(static_cast<float>(ctx.replica_id_in_sync_group() + 1));
  });
  const auto& ext = pod.extended();
  const std::string expected = "Multiple devices are not supported for pod_strategy";
  CHECK(error_of<value_error>([&] { (void) ext.reduce_to(reduce_op::sum, values, values); })
        == expected);
  CHECK(error_of<value_error>([&] {
          (void) ext.batch_reduce_to(reduce_op::sum, {{values, cpu_device(0)}, {values, values}});
        })
        == expected);
  variable w{tensor::scalar(0.0f)};
  CHECK(error_of<value_error>([&] { (void) ext.reduce_to(reduce_op::mean, values, w); })
        == expected);
  // One destination works, on any device.
  CHECK(ext.reduce_to(reduce_op::sum, values, cpu_device(2)).primary().at<float>(0) == 10.0f);
  CHECK(pod.reduce(reduce_op::mean, values).at<float>(0) == 2.5f);
  const auto batch = ext.batch_reduce_to(reduce_op::max, {{values, cpu_device(1)}});
  CHECK(batch.at(0).primary().at<float>(0) == 4.0f);
  // Inside run a merge function reduces onto every replica's device.
  const auto inside = pod.run([&](replica_context& ctx) {
    return ctx.merge_call([&](strategy& st, const per_replica<tensor>& v) {
      return st.extended().reduce_to(reduce_op::sum, v, v);
    }, tensor::scalar(1.0f));
  });
  for (const auto& x : inside.values())
    CHECK(x.at<float>(0) == 4.0f);
}

TEST_CASE("the destination rule is the pod strategy's: mirrored_strategy reduces onto several") {
  mirrored_strategy mirrored{cpu_devices(2)};
  auto scope = mirrored.scope();
  const auto two = mirrored.run([](replica_context&) { return tensor::scalar(1.0f); });
  const auto reduced = mirrored.extended().reduce_to(reduce_op::sum, two, two);
  CHECK(reduced.values().size() == 2);
  CHECK(reduced.primary().at<float>(0) == 2.0f);
}

TEST_CASE("the refusals and errors name the problem") {
  const auto topology = four_devices();
  SUBCASE("a topology of two tasks: a pod of several hosts is made from its cluster") {
    const pod_topology two_hosts{{2}, {{{0}}, {{1}}}};
    CHECK(error_of<value_error>([&] { (void) pod_strategy{two_hosts}; })
          == "pod_strategy: a topology of 2 tasks (hosts) runs one worker process per host: "
             "make the strategy from the cluster's cluster_resolver (docs/pod.md)");
    CHECK(error_of<value_error>([&] {
            (void) pod_strategy{topology, device_assignment::build(two_hosts, {1}, {1}, 2)};
          })
          == "pod_strategy: a device assignment of 2 tasks (hosts) runs one worker process per "
             "host: make the strategy from the cluster's cluster_resolver (docs/pod.md)");
  }
  SUBCASE("an assignment on another topology") {
    const auto two = pod_topology::from_devices(cpu_devices(2));
    CHECK(error_of<value_error>([&] { (void) pod_strategy{topology, device_assignment::build(two)}; })
          == "pod_strategy: the device_assignment is on another topology than the strategy's: "
             "mesh [2, 1, 1, 2] of 1 tasks x 4 devices, where the assignment's is mesh "
             "[1, 1, 1, 2] of 1 tasks x 2 devices");
  }
  SUBCASE("steps_per_run 0") {
    CHECK(error_of<value_error>([&] {
            (void) pod_strategy{topology, std::nullopt, {.steps_per_run = 0}};
          })
          == "pod_strategy: steps_per_run must be at least 1, got 0");
  }
}

// One host of a pod across processes: tests/pod_cluster_test.cpp starts two
// with TF_CONFIG and a token (a pod of 2 hosts), or one alone (the pod of
// its own devices). Exits 0 when the scenario went as expected, 1 (with a
// message on stderr) otherwise.
//
//   train K D   pod_strategy(resolver) over D virtual CPU devices per host,
//               replicas of 2 logical cores (device_assignment::build with
//               computation shape [1, 1, 1, 2], as many replicas as fit):
//               a two-stage MLP (layer 1 on logical core 0, layer 2 and the
//               loss as a part on core 1, gradients reduced in a
//               merge_call) trained for 24 steps of 16 rows as host loops
//               of K steps (the pod's steps_per_run). Prints the pod, where
//               the replicas and the variables' copies are, each loop's
//               last loss, then the weights, as hex floats
//   lost        as `train 1 4`, but the last host dies (SIGKILL) inside its
//               third step: every other host's loop raises peer_lost_error
//               naming it

#include "lockstep/lockstep.hpp"

#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

void require(bool condition, const std::string& what) {
  if (!condition)
    throw std::runtime_error("check failed: " + what);
}

constexpr std::int64_t inputs = 2;
constexpr std::int64_t hidden = 4;
constexpr std::int64_t global_batch = 16;
constexpr std::int64_t steps = 24;
constexpr float learning_rate = 0.2f;

/// Rows of 2 features and a target, deterministic, in global batches of 16.
dataset<tensor> rows() {
  std::vector<float> values;
  for (std::int64_t i = 0; i < steps * global_batch; ++i) {
    const float x0 = static_cast<float>(i % 7) / 7.0f - 0.4f;
    const float x1 = static_cast<float>(i % 5) / 5.0f - 0.5f;
    values.insert(values.end(), {x0, x1, 0.8f * x0 * x0 - 0.6f * x1 + 0.1f});
  }
  return dataset<tensor>::from_tensor_slices(tensor::from(values, {steps * global_batch, 3}))
    .batch(global_batch, true);
}

std::vector<float> floats(const tensor& t) {
  const auto d = t.data<float>();
  return {d.begin(), d.end()};
}

std::string hex(const std::vector<float>& values) {
  std::ostringstream out;
  out << std::hexfloat;
  for (const auto v : values)
    out << ' ' << v;
  return out.str();
}

std::string names(const std::vector<device_spec>& devices) {
  std::string out;
  for (const auto& d : devices)
    out += (out.empty() ? "" : ", ") + d.to_string();
  return out;
}

/// What layer 2 (on logical core 1) hands back to layer 1.
struct layer_two {
  tensor dw2; ///< [hidden, 1]
  tensor dh;  ///< [n, hidden]
  float loss = 0;
};

/// Layer 2 and the mean squared error on the current device; `h_elsewhere`
/// comes from core 0 and is copied here first.
layer_two output_layer(const variable& w2, const tensor& h_elsewhere,
                       const std::vector<float>& targets) {
  const auto h = floats(h_elsewhere.to(current_device()));
  const auto w = floats(w2.read_value());
  const auto n = static_cast<std::int64_t>(targets.size());
  std::vector<float> dw2(hidden, 0.0f);
  std::vector<float> dh(static_cast<std::size_t>(n * hidden));
  layer_two out;
  for (std::int64_t i = 0; i < n; ++i) {
    float y = 0;
    for (std::int64_t j = 0; j < hidden; ++j)
      y += h[i * hidden + j] * w[j];
    const float error = y - targets[i];
    out.loss += error * error / static_cast<float>(n);
    const float dy = 2.0f * error / static_cast<float>(n);
    for (std::int64_t j = 0; j < hidden; ++j) {
      dw2[j] += h[i * hidden + j] * dy;
      dh[i * hidden + j] = dy * w[j];
    }
  }
  out.dw2 = tensor::from(dw2, {hidden, 1});
  out.dh = tensor::from(dh, {n, hidden});
  return out;
}

pod_options options_of(std::size_t steps_per_run, int devices) {
  pod_options o;
  o.steps_per_run = steps_per_run;
  o.cluster.local_devices = cpu_devices(devices);
  o.cluster.timeout = 30s;
  o.cluster.join_timeout = 60s;
  o.cluster.peer_timeout = 2s;
  o.cluster.heartbeat_interval = 200ms;
  return o;
}

/// The pod of this cluster with `devices` CPU devices per host, as many
/// replicas of 2 logical cores as fit.
pod_strategy make_pod(std::size_t steps_per_run, int devices) {
  const cluster_resolver resolver;
  const auto topology = initialize_pod_system(resolver, cpu_devices(devices)).topology;
  const auto replicas = topology.num_devices() / 2;
  return pod_strategy{resolver, device_assignment::build(topology, {1, 1, 1, 2}, {}, replicas),
                      options_of(steps_per_run, devices)};
}

/// Trains the MLP on `pod` in host loops; `die_at_step` (0: never): the
/// last host's replica 0 kills the process inside that step.
void train(const pod_strategy& pod, std::int64_t die_at_step) {
  const auto& cluster = pod.cluster();
  const bool last_host = cluster.world_size > 1 && cluster.rank + 1 == cluster.world_size;
  auto scope = pod.scope();
  const auto& ext = pod.extended();
  std::vector<float> w1_init;
  for (std::int64_t k = 0; k < inputs * hidden; ++k)
    w1_init.push_back(0.1f * static_cast<float>(k % 5) - 0.15f);
  auto w1 = [&] {
    auto core = ext.experimental_logical_device(0);
    return variable{tensor::from(w1_init, {inputs, hidden}), {.name = "w1"}};
  }();
  auto w2 = [&] {
    auto core = ext.experimental_logical_device(1);
    return variable{tensor::from<float>({0.3f, -0.2f, 0.25f, 0.1f}, {hidden, 1}),
                    {.name = "w2"}};
  }();
  std::printf("pod: %zu hosts, %zu replicas per host, %zu replicas in sync, steps_per_run %zu\n",
              pod.num_hosts(), pod.num_replicas_per_host(), pod.num_replicas_in_sync(),
              pod.steps_per_run());
  std::printf("replicas: %s\n", names(ext.worker_devices()).c_str());
  std::printf("w1 copies: %s\n", names(w1.devices()).c_str());
  std::printf("w2 copies: %s\n", names(w2.devices()).c_str());
  auto it = pod.experimental_distribute_dataset(rows()).make_iterator();
  std::atomic<std::int64_t> step{0};
  auto one_step = [&](multi_step_context& loop, const tensor& batch) {
    auto& ctx = *get_replica_context();
    if (last_host && ctx.replica_id_in_sync_group() == cluster.rank * pod.num_replicas_per_host()
        && ++step == die_at_step)
      ::raise(SIGKILL);
    const auto data = floats(batch);
    const auto n = batch.shape()[0];
    const auto w = floats(w1.read_value());
    std::vector<float> z(static_cast<std::size_t>(n * hidden), 0.0f);
    std::vector<float> h(z.size());
    std::vector<float> targets;
    for (std::int64_t i = 0; i < n; ++i) {
      targets.push_back(data[i * 3 + 2]);
      for (std::int64_t j = 0; j < hidden; ++j) {
        for (std::int64_t a = 0; a < inputs; ++a)
          z[i * hidden + j] += data[i * 3 + a] * w[a * hidden + j];
        h[i * hidden + j] = z[i * hidden + j] > 0 ? z[i * hidden + j] : 0.0f;
      }
    }
    const auto h_tensor = tensor::from(h, {n, hidden});
    auto two = ctx.experimental_logical_device(
      1, [&w2, h_tensor, targets] { return output_layer(w2, h_tensor, targets); });
    const auto dh = floats(two.dh.to(current_device()));
    std::vector<float> dw1(static_cast<std::size_t>(inputs * hidden), 0.0f);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < hidden; ++j)
        if (z[i * hidden + j] > 0)
          for (std::int64_t a = 0; a < inputs; ++a)
            dw1[a * hidden + j] += data[i * 3 + a] * dh[i * hidden + j];
    ctx.merge_call(
      [&](strategy& s, const per_replica<tensor>& g1, const per_replica<tensor>& g2) {
        const auto sgd = [](tensor& value, const tensor& gradient) {
          auto v = value.data<float>();
          const auto g = gradient.data<float>();
          for (std::size_t k = 0; k < v.size(); ++k)
            v[k] -= learning_rate * g[k];
        };
        s.extended().update(w1, sgd, s.extended().reduce_to(reduce_op::mean, g1, w1));
        s.extended().update(w2, sgd, s.extended().reduce_to(reduce_op::mean, g2, w2));
      },
      tensor::from(dw1, {inputs, hidden}), two.dw2.to(current_device()));
    loop.set_last_step_output("loss", tensor::scalar(two.loss), reduce_op::mean);
  };
  std::size_t calls = 0;
  std::int64_t done = 0;
  for (;;) {
    auto loop = ext.experimental_run_steps_on_iterator(one_step, it);
    if (loop.steps() == 0)
      break;
    ++calls;
    done += static_cast<std::int64_t>(loop.steps());
    const auto loss = std::get<tensor>(loop.last_step_outputs().at("loss")).at<float>(0);
    std::printf("loop %zu: %zu steps, loss%s\n", calls, loop.steps(), hex({loss}).c_str());
  }
  require(done == steps, "24 steps, got " + std::to_string(done));
  // Every copy of a variable holds the same bits.
  for (const auto* v : {&w1, &w2})
    for (const auto& copy : v->values())
      require(floats(copy.read_value()) == floats(v->values().front().read_value()),
              "the copies of " + v->name() + " agree");
  std::printf("w1 =%s\n", hex(floats(w1.read_value())).c_str());
  std::printf("w2 =%s\n", hex(floats(w2.read_value())).c_str());
}

} // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const std::string scenario = args.empty() ? "" : args[0];
  try {
    if (scenario == "train" && args.size() == 3) {
      const auto pod = make_pod(std::stoul(args[1]), std::stoi(args[2]));
      train(pod, 0);
      std::printf("ok train\n");
      return 0;
    }
    if (scenario == "lost") {
      const auto pod = make_pod(1, 4);
      try {
        train(pod, 3);
      } catch (const peer_lost_error& e) {
        const std::string text = e.what();
        const auto last = std::to_string(pod.cluster().world_size - 1);
        require(text.find("worker " + last) != std::string::npos
                  || text.find("worker(s) " + last) != std::string::npos,
                "peer_lost_error names worker " + last + ": " + text);
        std::printf("ok lost: %s\n", e.what());
        return 0;
      }
      throw std::runtime_error("training went on after the last host died");
    }
    std::fprintf(stderr, "usage: pod_worker train K D | lost\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pod_worker failed: %s\n", e.what());
    return 1;
  }
}

// examples/pod_fashion_mnist's split model: the main job's trainer with
// layer 1 on logical core 0 and the later layers and the loss on core 1 of
// a pod of 2 replicas x 2 cores gives, step for step, the weights of the
// unsplit model on mirrored_strategy over the replicas' core-0 devices, bit
// for bit; host loops of K steps (steps_per_run) give those of one step per
// call. The data is small and synthetic, so the test needs no download.

#include "mlp.hpp"
#include "split_model.hpp"
#include "trainer.hpp"

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <sys/wait.h>
#include <vector>

using namespace lockstep;
using namespace fashion_mnist;

namespace {

/// `count` examples of 12 features in 4 classes, random labels: the
/// numbers, not the learning, are compared.
training_data synthetic(std::int64_t count) {
  std::mt19937_64 generator{11};
  const auto uniform = [&] { return static_cast<float>(generator() >> 40) / float(1 << 24) - 0.5f; };
  std::vector<float> x(static_cast<std::size_t>(count * 12));
  for (auto& v : x)
    v = uniform();
  std::vector<std::int64_t> y(static_cast<std::size_t>(count));
  for (auto& v : y)
    v = static_cast<std::int64_t>(generator() % 4);
  const auto images = tensor::from(x, {count, 12});
  const auto labels = tensor::from(y, {count});
  return {images, labels, images, labels};
}

training_config small_config(int steps_per_call) {
  training_config config;
  config.model = mlp_spec{{12, 10, 8, 4}};
  config.epochs = 2;
  config.global_batch = 16;
  config.steps_per_call = steps_per_call;
  config.seed = 5;
  return config;
}

std::vector<std::vector<float>> floats(const std::vector<tensor>& weights) {
  std::vector<std::vector<float>> out;
  for (const auto& w : weights) {
    const auto d = w.data<float>();
    out.emplace_back(d.begin(), d.end());
  }
  return out;
}

} // namespace

TEST_CASE("the split model on the pod trains exactly as the unsplit one on mirrored_strategy") {
  const auto data = synthetic(100); // 6 full batches of 16 an epoch, 4 examples left out
  for (const int k : {1, 5}) {
    CAPTURE(k);
    const auto split = train(with_pod_placement(small_config(k)), data);
    // The unsplit model on the replicas' core-0 devices (the pod's CPU:0
    // and CPU:2), the same static batches.
    auto plain = small_config(k);
    plain.replicas = 2;
    plain.placement.make_strategy = [](const training_config&) {
      return lockstep::strategy{mirrored_strategy{std::vector<device_spec>{cpu_device(0), cpu_device(2)}}};
    };
    plain.placement.static_batches = true;
    const auto unsplit = train(plain, data);
    CHECK(split.global_step == 12);
    CHECK(unsplit.global_step == 12);
    CHECK(floats(split.weights) == floats(unsplit.weights));
    REQUIRE(split.epochs.size() == 2);
    CHECK(split.epochs[1].train_loss == unsplit.epochs[1].train_loss);
    CHECK(split.epochs[1].test_accuracy == unsplit.epochs[1].test_accuracy);
    CHECK(floats(split.weights) != floats(initial_parameters(plain.model, plain.seed)));
  }
  CHECK(floats(train(with_pod_placement(small_config(1)), data).weights)
        == floats(train(with_pod_placement(small_config(4)), data).weights));
}

TEST_CASE("the split model's layers live on their logical cores") {
  const auto pod = make_pod_strategy(3);
  auto scope = pod.scope();
  std::vector<variable> model;
  const auto spec = mlp_spec{{12, 10, 8, 4}};
  const auto initial = initial_parameters(spec, 1);
  for (std::size_t i = 0; i < initial.size(); ++i) {
    auto core = pod.extended().experimental_logical_device(pod_logical_core(i));
    model.emplace_back(initial[i]);
  }
  const std::vector<device_spec> core0{cpu_device(0).canonical(), cpu_device(2).canonical()};
  const std::vector<device_spec> core1{cpu_device(1).canonical(), cpu_device(3).canonical()};
  CHECK(model[0].devices() == core0);
  CHECK(model[1].devices() == core0);
  for (std::size_t i = 2; i < model.size(); ++i)
    CHECK(model[i].devices() == core1);
  CHECK(pod.extended().steps_per_run() == 3);
  CHECK(pod.num_replicas_in_sync() == 2);
}

namespace {

/// The program's exit status and what it printed (stdout and stderr), run
/// with `args` (POD_FASHION_MNIST names it; meson test sets it).
std::pair<int, std::string> run_program(const std::string& args) {
  const char* path = std::getenv("POD_FASHION_MNIST");
  REQUIRE_MESSAGE(path != nullptr, "set POD_FASHION_MNIST to the built pod_fashion_mnist");
  auto* pipe = ::popen(("'" + std::string{path} + "' " + args + " 2>&1 </dev/null").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  while (const auto n = std::fread(buffer, 1, sizeof buffer, pipe))
    out.append(buffer, n);
  const auto status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

} // namespace

TEST_CASE("pod_fashion_mnist's usage is its own: its name, no --replicas, which it refuses") {
  const auto [help_status, help] = run_program("--help");
  CHECK(help_status == 0);
  CHECK(help.rfind("usage: pod_fashion_mnist [options]\n", 0) == 0);
  CHECK(help.find("--replicas") == std::string::npos);
  CHECK(help.find("--steps-per-call K sets the pod's steps_per_run") != std::string::npos);
  const auto [status, text] = run_program("--replicas 3");
  CHECK(status == 2);
  CHECK(text.find("pod_fashion_mnist: --replicas: the pod has 2 replicas") != std::string::npos);
  CHECK(text.find("usage: pod_fashion_mnist") != std::string::npos);
}

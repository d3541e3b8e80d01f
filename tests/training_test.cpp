// The training example's correctness bars (examples/train_fashion_mnist):
// training with 2, 3 and 4 replicas at global batch B gives the weights of
// 1 replica at batch B (up to float rounding of the summed gradients), K
// steps per call give the weights of one step per call bit for bit, and a
// run stopped after an epoch or in the middle of one and resumed from its
// checkpoint ends with the bits of a run that never stopped. The data is a
// small synthetic problem made here, so the test needs no download.

#include "mlp.hpp"
#include "trainer.hpp"

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace lockstep;
using namespace fashion_mnist;

namespace {

const mlp_spec small_model{{12, 10, 8, 4}};

/// `count` examples of 12 features in 4 classes: the class is the largest
/// of four fixed linear scores of the features, so a model can learn it.
training_data synthetic(std::int64_t count, std::int64_t test_count) {
  std::mt19937_64 generator{7};
  const auto uniform = [&] { return static_cast<float>(generator() >> 40) / float(1 << 24) - 0.5f; };
  std::vector<float> direction(12 * 4);
  for (auto& d : direction)
    d = uniform();
  const auto make = [&](std::int64_t n, tensor& images, tensor& labels) {
    std::vector<float> x(static_cast<std::size_t>(n * 12));
    std::vector<std::int64_t> y(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      float best = -1e9f;
      for (int f = 0; f < 12; ++f)
        x[static_cast<std::size_t>(i * 12 + f)] = uniform();
      for (int c = 0; c < 4; ++c) {
        float score = 0;
        for (int f = 0; f < 12; ++f)
          score += x[static_cast<std::size_t>(i * 12 + f)] * direction[static_cast<std::size_t>(f * 4 + c)];
        if (score > best) {
          best = score;
          y[static_cast<std::size_t>(i)] = c;
        }
      }
    }
    images = tensor::from(x, {n, 12});
    labels = tensor::from(y, {n});
  };
  training_data data;
  make(count, data.train_images, data.train_labels);
  make(test_count, data.test_images, data.test_labels);
  return data;
}

training_config config_for(int replicas, optimizer_kind kind) {
  training_config config;
  config.model = small_model;
  config.optimizer.kind = kind;
  config.optimizer.learning_rate = kind == optimizer_kind::adam ? 0.01 : 0.1;
  config.replicas = replicas;
  config.epochs = 2;
  config.global_batch = 24;
  config.seed = 3;
  return config;
}

/// max |a - b| / max |a| over the elements of each tensor, the largest.
double max_relative_difference(const std::vector<tensor>& a, const std::vector<tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].data<float>();
    const auto y = b[i].data<float>();
    REQUIRE(x.size() == y.size());
    double scale = 0, diff = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      scale = std::max(scale, std::abs(static_cast<double>(x[k])));
      diff = std::max(diff, std::abs(static_cast<double>(x[k]) - y[k]));
    }
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

bool bit_identical(const std::vector<tensor>& a, const std::vector<tensor>& b) {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].byte_size() != b[i].byte_size()
        || std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].byte_size()) != 0)
      return false;
  return true;
}

/// `resumed` went on from step `from` and ended where `straight` did, bit
/// for bit.
void check_resumed(const training_result& resumed, std::int64_t from,
                   const training_result& straight) {
  REQUIRE(resumed.resumed_from_step);
  CHECK(*resumed.resumed_from_step == from);
  CHECK(resumed.global_step == straight.global_step);
  CHECK(bit_identical(straight.weights, resumed.weights));
}

} // namespace

TEST_CASE("N replicas at global batch B reach the weights of one replica at batch B") {
  // 250 examples in batches of 24: 11 steps an epoch, the last a partial
  // batch of 10 split unevenly; 22 steps in all.
  const auto data = synthetic(250, 40);
  for (auto kind : {optimizer_kind::adam, optimizer_kind::sgd_momentum}) {
    CAPTURE(to_string(kind));
    const auto one = train(config_for(1, kind), data);
    REQUIRE(one.global_step == 22);
    CHECK_FALSE(bit_identical(one.weights, initial_parameters(small_model, 3)));
    for (int n : {2, 3, 4}) {
      CAPTURE(n);
      const auto many = train(config_for(n, kind), data);
      CHECK(many.global_step == 22);
      const auto difference = max_relative_difference(one.weights, many.weights);
      CAPTURE(difference);
      CHECK(difference <= 1e-5);
    }
  }
}

TEST_CASE("the model learns: the loss falls and accuracy beats chance") {
  auto config = config_for(2, optimizer_kind::adam);
  config.epochs = 8;
  const auto data = synthetic(600, 200);
  const auto result = train(config, data);
  REQUIRE(result.epochs.size() == 8);
  CHECK(result.epochs.back().train_loss < 0.6 * result.epochs.front().train_loss);
  CHECK(result.epochs.back().test_accuracy > 0.6); // 4 classes: chance is 0.25
  for (const auto& e : result.epochs) {
    CHECK(e.train_accuracy >= 0);
    CHECK(e.train_accuracy <= 1);
    CHECK(e.examples_per_second > 0);
  }
}

TEST_CASE("K steps per call give the weights of one step per call, bit for bit") {
  const auto data = synthetic(250, 40);
  const auto one_by_one = train(config_for(3, optimizer_kind::adam), data);
  for (int k : {2, 5, 11, 40}) {
    CAPTURE(k);
    auto config = config_for(3, optimizer_kind::adam);
    config.steps_per_call = k;
    const auto fused = train(config, data);
    CHECK(fused.global_step == 22);
    CHECK(bit_identical(one_by_one.weights, fused.weights));
  }
}

TEST_CASE("a run resumed from its checkpoint ends with the bits of one that never stopped") {
  const auto data = synthetic(250, 40);
  auto config = config_for(2, optimizer_kind::adam);
  config.epochs = 3;
  const auto straight = train(config, data);
  REQUIRE(straight.global_step == 33);

  SUBCASE("stopped after an epoch") {
    temporary_directory dir{"training"};
    auto first = config;
    first.epochs = 1;
    first.checkpoint_dir = dir.path();
    const auto part = train(first, data);
    CHECK(part.global_step == 11);
    CHECK_FALSE(part.resumed_from_step);
    auto rest = config;
    rest.checkpoint_dir = dir.path();
    // Steps count global batches: resuming with another batch is refused.
    auto other_batch = rest;
    other_batch.global_batch = 12;
    CHECK(error_of<value_error>([&] { (void) train(other_batch, data); }).find(
              "count steps of global batch 24, not 12") != std::string::npos);
    const auto resumed = train(rest, data);
    check_resumed(resumed, 11, straight);
    CHECK(resumed.epochs.size() == 2);
  }
  SUBCASE("stopped in the middle of an epoch, as by Ctrl-C") {
    temporary_directory dir{"training"};
    auto stopped = config;
    stopped.checkpoint_dir = dir.path();
    std::atomic<bool> stop{false};
    training_observer observer;
    observer.on_step = [&](int epoch, std::int64_t step, std::int64_t, double, double) {
      if (epoch == 2 && step == 4)
        stop.store(true);
    };
    const auto part = train(stopped, data, observer, &stop);
    CHECK(part.interrupted);
    CHECK(part.global_step == 15);
    check_resumed(train(stopped, data), 15, straight);
  }
}

TEST_CASE("a bad configuration or data that does not fit the model is a value_error") {
  const auto data = synthetic(50, 10);
  auto config = config_for(2, optimizer_kind::adam);
  config.replicas = 0;
  CHECK(error_of<value_error>([&] { (void) train(config, data); })
        == "training: replicas must be positive, got 0");
  config = config_for(2, optimizer_kind::adam);
  config.global_batch = 0;
  CHECK(error_of<value_error>([&] { (void) train(config, data); })
        == "training: global batch must be positive, got 0");
  config = config_for(2, optimizer_kind::adam);
  config.model = mlp_spec{{13, 4}};
  CHECK(error_of<value_error>([&] { (void) train(config, data); })
            .find("mlp: images must be float32 [batch, 13]")
        != std::string::npos);
  CHECK_THROWS_WITH_AS(parse_optimizer_kind("rmsprop"),
                       "unknown optimizer 'rmsprop': expected sgd or adam", value_error);
}

TEST_CASE("loss_and_gradients matches finite differences") {
  const mlp_spec spec{{5, 4, 3}};
  auto parameters = initial_parameters(spec, 11);
  const auto images = tensor::from<float>({0.5f, -1, 0.25f, 2, -0.5f, 1, 0.75f, -0.25f, 0, 1.5f}, {2, 5});
  const auto labels = tensor::from<std::int64_t>({2, 0});
  // Non-zero biases so that every ReLU is clearly on or off.
  for (std::size_t l = 0; l < 2; ++l) {
    auto b = parameters[2 * l + 1].data<float>();
    for (std::size_t k = 0; k < b.size(); ++k)
      b[k] = 0.1f * static_cast<float>(k + 1);
  }
  const auto analytic = loss_and_gradients(spec, parameters, images, labels, 4);
  for (std::size_t p = 0; p < parameters.size(); ++p) {
    auto values = parameters[p].data<float>();
    const auto gradient = analytic.gradients[p].data<float>();
    for (std::size_t k = 0; k < values.size(); ++k) {
      const float saved = values[k];
      const float h = 1e-2f;
      values[k] = saved + h;
      const auto up = loss_and_gradients(spec, parameters, images, labels, 4).loss;
      values[k] = saved - h;
      const auto down = loss_and_gradients(spec, parameters, images, labels, 4).loss;
      values[k] = saved;
      CAPTURE(p);
      CAPTURE(k);
      CHECK(gradient[k] == doctest::Approx((up - down) / (2 * h)).epsilon(2e-2).scale(1e-3));
    }
  }
  const auto empty = loss_and_gradients(spec, parameters, tensor::zeros(dtype::f32, {0, 5}),
                                        tensor::zeros(dtype::i64, {0}), 4);
  CHECK(empty.loss == 0);
  CHECK(empty.correct == 0);
  CHECK(empty.gradients[0] == tensor::zeros(dtype::f32, {5, 4}));
  CHECK_THROWS_WITH_AS(loss_and_gradients(spec, parameters, images,
                                          tensor::from<std::int64_t>({3, 0}), 4),
                       "mlp: label 3 is not a class in [0, 3)", value_error);
}

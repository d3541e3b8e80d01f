// The training example's correctness bars (examples/train_fashion_mnist):
// training with 2, 3 and 4 replicas at global batch B gives the weights of
// 1 replica at batch B (up to float rounding of the summed gradients), K
// steps per call give the weights of one step per call bit for bit, and a
// run stopped after an epoch or in the middle of one and resumed from its
// checkpoint ends with the bits of a run that never stopped. The data is a
// small synthetic problem made here, so the test needs no download.

#include "mlp.hpp"
#include "output_files.hpp"
#include "plot.hpp"
#include "printable.hpp"
#include "trainer.hpp"

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
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
              "it was saved with global batch 24, this run has 12") != std::string::npos);
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
    observer.on_progress = [&](const step_progress& p) {
      if (p.epoch == 2 && p.step == 4)
        stop.store(true);
    };
    const auto part = train(stopped, data, observer, &stop);
    CHECK(part.interrupted);
    CHECK(part.global_step == 15);
    // The resumed epoch's progress counts the examples of the steps this
    // run took, not the 4 it skipped.
    std::vector<step_progress> progress;
    training_observer watcher;
    watcher.on_progress = [&](const step_progress& p) { progress.push_back(p); };
    const auto resumed = train(stopped, data, watcher);
    check_resumed(resumed, 15, straight);
    // Epoch 2's loss and accuracy cover all its 11 steps, the 4 before the
    // stop included (the checkpoint kept their figures): those of the run
    // that never stopped, to the last bit.
    REQUIRE(resumed.epochs.size() == 2);
    REQUIRE(straight.epochs.size() == 3);
    CHECK(resumed.epochs[0].epoch == 2);
    CHECK(resumed.epochs[0].train_loss == straight.epochs[1].train_loss);
    CHECK(resumed.epochs[0].train_accuracy == straight.epochs[1].train_accuracy);
    CHECK(resumed.epochs[1].train_loss == straight.epochs[2].train_loss);
    REQUIRE(progress.size() == 18); // 7 steps of epoch 2, 11 of epoch 3
    for (const auto& p : progress) {
      CAPTURE(p.epoch);
      CAPTURE(p.step);
      const auto taken = p.epoch == 2 ? p.step - 4 : p.step;
      // Batches of 24, the last of an epoch 10.
      CHECK(p.examples == (p.step == 11 ? (taken - 1) * 24 + 10 : taken * 24));
      CHECK(p.seconds > 0);
      CHECK(p.examples_per_second() == doctest::Approx(static_cast<double>(p.examples) / p.seconds));
    }
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
  config.global_batch = 51;
  CHECK(error_of<value_error>([&] { (void) train(config, data); })
        == "training: the global batch 51 is larger than the training set (50 examples)");
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

namespace {

/// Plain variables named and shaped as an Adam checkpoint of `config`
/// holds them (with the recorded settings when `settings`), filled from the
/// checkpoint at `path`: a test edits them and saves a checkpoint that the
/// trainer never would.
std::vector<variable> checkpoint_variables(const training_config& config,
                                           const std::filesystem::path& path, bool settings) {
  std::vector<variable> vars;
  const auto names = parameter_names(config.model);
  const auto initial = initial_parameters(config.model, config.seed);
  for (std::size_t i = 0; i < names.size(); ++i) {
    vars.emplace_back(initial[i], variable_options{.name = names[i]});
    vars.emplace_back(initial[i], variable_options{.name = names[i] + "/m"});
    vars.emplace_back(initial[i], variable_options{.name = names[i] + "/v"});
  }
  for (const char* name : {"iterations", "epoch", "global_batch"})
    vars.emplace_back(tensor::scalar(std::int64_t{0}), variable_options{.name = name});
  if (settings) {
    for (const char* name : {"config/seed", "config/optimizer", "config/layer_count"})
      vars.emplace_back(tensor::scalar(std::int64_t{0}), variable_options{.name = name});
    for (const char* name : {"config/learning_rate", "config/lr_decay", "config/momentum",
                             "config/beta1", "config/beta2", "config/epsilon"})
      vars.emplace_back(tensor::scalar(0.0), variable_options{.name = name});
    vars.emplace_back(tensor::from(config.model.layers), variable_options{.name = "config/layers"});
  }
  (void) restore(path, vars);
  return vars;
}

void set_counter(std::vector<variable>& vars, const std::string& name, std::int64_t value) {
  const auto found = std::find_if(vars.begin(), vars.end(),
                                  [&](const variable& v) { return v.name() == name; });
  REQUIRE(found != vars.end());
  found->assign(tensor::scalar(value));
}

int checkpoint_files(const std::filesystem::path& dir) {
  int count = 0;
  if (std::filesystem::is_directory(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir))
      count += e.path().extension() == ".safetensors" ? 1 : 0;
  return count;
}

} // namespace

TEST_CASE("a resume refuses other settings, naming the field, the saved and the given value") {
  const auto data = synthetic(250, 40);
  temporary_directory dir{"training"};
  auto config = config_for(2, optimizer_kind::adam);
  config.checkpoint_dir = dir.path();
  config.epochs = 1;
  REQUIRE(train(config, data).global_step == 11);
  const auto source = "cannot resume from " + (dir.path() / "ckpt-11.safetensors").string()
                      + ": it was saved with ";
  config.epochs = 2;
  const auto refused = [&](auto change, const std::string& field) {
    auto changed = config;
    change(changed);
    CAPTURE(field);
    CHECK(error_of<value_error>([&] { (void) train(changed, data); }).find(source + field)
          != std::string::npos);
  };
  refused([](training_config& c) { c.seed = 4; }, "seed 3, this run has 4");
  refused([](training_config& c) { c.model = mlp_spec{{12, 9, 8, 4}}; },
          "layer widths 12-10-8-4, this run has 12-9-8-4");
  refused([](training_config& c) { c.model = mlp_spec{{12, 10, 4}}; },
          "layer widths 12-10-8-4, this run has 12-10-4");
  refused([](training_config& c) { c.optimizer.kind = optimizer_kind::sgd_momentum; },
          "optimizer adam, this run has sgd");
  refused([](training_config& c) { c.optimizer.learning_rate = 0.02; },
          "learning rate 0.01, this run has 0.02");
  refused([](training_config& c) { c.lr_decay = 0.5; },
          "learning-rate decay 1, this run has 0.5");
  refused([](training_config& c) { c.optimizer.beta1 = 0.8; }, "beta1 0.9, this run has 0.8");
  refused([](training_config& c) { c.optimizer.beta2 = 0.99; }, "beta2 0.999, this run has 0.99");
  refused([](training_config& c) { c.optimizer.epsilon = 1e-8; },
          "epsilon 1e-07, this run has 1e-08");
  refused([](training_config& c) { c.global_batch = 12; }, "global batch 24, this run has 12");
  // Nothing was written by the refused runs.
  CHECK(checkpoint_files(dir.path()) == 1);

  // Replicas and steps per call may differ: they do not change the weights.
  auto straight = config_for(2, optimizer_kind::adam);
  straight.epochs = 2;
  auto other = config;
  other.replicas = 3;
  other.steps_per_call = 5;
  const auto resumed = train(other, data);
  REQUIRE(resumed.resumed_from_step);
  CHECK(*resumed.resumed_from_step == 11);
  CHECK(max_relative_difference(train(straight, data).weights, resumed.weights) <= 1e-5);
}

TEST_CASE("a resume cross-checks the step against the epoch and iteration counters") {
  const auto data = synthetic(250, 40);
  temporary_directory dir{"training"};
  auto config = config_for(2, optimizer_kind::adam);
  config.checkpoint_dir = dir.path();
  config.epochs = 1;
  REQUIRE(train(config, data).global_step == 11);
  const auto saved = dir.path() / "ckpt-11.safetensors";
  auto vars = checkpoint_variables(config, saved, true);
  const auto edited = dir.path() / "edited.safetensors";
  auto resume = config;
  resume.checkpoint_dir.clear();
  resume.resume_from = edited;
  resume.epochs = 2;

  // Step 11 is 1 full epoch of 11 steps; the counter says 2.
  set_counter(vars, "epoch", 2);
  save(edited, vars, 11);
  CHECK(error_of<value_error>([&] { (void) train(resume, data); })
        == edited.string() + ": step 11 is 1 full epochs at 11 steps an epoch, but the"
               " checkpoint's epoch counter says 2: the training set differs from the one it"
               " was saved with, or the checkpoint is damaged");
  // The same checkpoint with a training set of other size: 5 steps an epoch.
  set_counter(vars, "epoch", 1);
  save(edited, vars, 11);
  CHECK(error_of<value_error>([&] { (void) train(resume, synthetic(120, 10)); })
            .find("step 11 is 2 full epochs at 5 steps an epoch, but the checkpoint's epoch"
                  " counter says 1")
        != std::string::npos);
  // The optimizer's iteration count says 7 steps were applied, not 11.
  set_counter(vars, "iterations", 7);
  save(edited, vars, 11);
  CHECK(error_of<data_loss_error>([&] { (void) train(resume, data); })
            .find("the optimizer applied 7 steps, but the checkpoint's step is 11")
        != std::string::npos);
  // A negative step cannot be saved (and restore refuses one: checkpoint_test).
  CHECK(error_of<value_error>([&] { save(edited, vars, -4); }).find("got -4")
        != std::string::npos);
}

TEST_CASE("a resume checks the epoch's figures so far against the step, and says when there "
          "are none") {
  const auto data = synthetic(250, 40);
  temporary_directory dir{"training"};
  auto config = config_for(2, optimizer_kind::adam);
  config.checkpoint_dir = dir.path();
  config.epochs = 1;
  std::atomic<bool> stop{false};
  training_observer stopper;
  stopper.on_progress = [&](const step_progress& p) {
    if (p.step == 4)
      stop.store(true);
  };
  REQUIRE(train(config, data, stopper, &stop).global_step == 4);
  const auto saved = dir.path() / "ckpt-4.safetensors";
  auto vars = checkpoint_variables(config, saved, true);
  const auto edited = dir.path() / "edited.safetensors";
  auto resume = config;
  resume.checkpoint_dir.clear();
  resume.resume_from = edited;

  // Figures of 3 steps where the step puts 4 before it in its epoch.
  vars.emplace_back(tensor::from<double>({0.0, 0, 0, 0}), variable_options{.name = "epoch_so_far"});
  (void) restore(saved, {vars.back()});
  CHECK(vars.back().value().data<double>()[3] == 4);
  vars.back().assign(tensor::from<double>({1.5, 50, 96, 3}));
  save(edited, vars, 4);
  CHECK(error_of<data_loss_error>([&] { (void) train(resume, data); })
        == edited.string() + ": its figures of the epoch so far cover 3 steps, but 4 steps"
                             " of epoch 1 come before its step 4");

  // A checkpoint saved inside an epoch before the figures were kept: the
  // resumed epoch's row covers the steps this run takes, and a note says so.
  vars.pop_back();
  save(edited, vars, 4);
  std::vector<std::string> notes;
  training_observer watcher;
  watcher.on_note = [&](const std::string& text) { notes.push_back(text); };
  const auto resumed = train(resume, data, watcher);
  CHECK(resumed.global_step == 11);
  CHECK(std::any_of(notes.begin(), notes.end(), [&](const std::string& note) {
    return note == "note: " + edited.string() + " keeps no figures of the 4 steps of epoch 1"
                   " before it (it was saved before they were kept): that epoch's loss and"
                   " accuracy cover only the steps this run takes";
  }));
}

TEST_CASE("resume_from resumes from that file, and later saves go to the checkpoint directory") {
  const auto data = synthetic(250, 40);
  auto config = config_for(2, optimizer_kind::adam);
  config.epochs = 3;
  const auto straight = train(config, data);
  temporary_directory first{"training"}, later{"training"};
  auto part = config;
  part.epochs = 2;
  part.checkpoint_dir = first.path();
  REQUIRE(train(part, data).global_step == 22);

  SUBCASE("from an older checkpoint of the directory, into another") {
    auto rest = config;
    rest.resume_from = first.path() / "ckpt-11.safetensors";
    rest.checkpoint_dir = later.path();
    std::vector<std::string> notes;
    training_observer observer;
    observer.on_note = [&](const std::string& text) { notes.push_back(text); };
    check_resumed(train(rest, data, observer), 11, straight);
    CHECK(std::filesystem::is_regular_file(later.path() / "ckpt-33.safetensors"));
    CHECK(std::find(notes.begin(), notes.end(),
                    "later checkpoints go to " + later.path().string())
          != notes.end());
  }
  SUBCASE("the newest unreadable: the error says how to resume from another") {
    const auto newest = first.path() / "ckpt-22.safetensors";
    std::filesystem::resize_file(newest, std::filesystem::file_size(newest) / 2);
    auto rest = config;
    rest.checkpoint_dir = first.path();
    const auto message = error_of<lockstep::error>([&] { (void) train(rest, data); });
    CHECK(message.find(newest.string()) != std::string::npos);
    CHECK(message.find("to resume from a readable checkpoint, name it with --resume-from FILE")
          != std::string::npos);
    rest.resume_from = first.path() / "ckpt-11.safetensors";
    check_resumed(train(rest, data), 11, straight);
  }
  SUBCASE("a checkpoint from before the settings were recorded resumes with a note") {
    const auto old = later.path() / "old.safetensors";
    auto vars = checkpoint_variables(config, first.path() / "ckpt-11.safetensors", false);
    save(old, vars, 11);
    auto rest = config;
    rest.resume_from = old;
    std::vector<std::string> notes;
    training_observer observer;
    observer.on_note = [&](const std::string& text) { notes.push_back(text); };
    check_resumed(train(rest, data, observer), 11, straight);
    REQUIRE_FALSE(notes.empty());
    CHECK(notes.front().find(old.string() + " records no run settings") != std::string::npos);
  }
}

TEST_CASE("a loss that is not finite stops training with an error naming the epoch and step") {
  const auto data = synthetic(250, 40);
  for (int k : {1, 5}) {
    CAPTURE(k);
    temporary_directory dir{"training"};
    auto config = config_for(2, optimizer_kind::adam);
    config.optimizer.learning_rate = 1e30;
    config.steps_per_call = k;
    config.checkpoint_dir = dir.path();
    const auto message = error_of<value_error>([&] { (void) train(config, data); });
    CHECK(message.find("training: the loss is not finite (") == 0);
    CHECK(message.find(") at epoch 1, step 2 of 11 (global step 2): the training diverged; try a"
                       " lower learning rate (--lr; this epoch's is 1e+30)")
          != std::string::npos);
    CHECK(checkpoint_files(dir.path()) == 0);
  }
}

TEST_CASE("printable escapes bytes that are not UTF-8, and control characters") {
  CHECK(printable("plain/path.csv") == "plain/path.csv");
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(printable("a\xff" "b") == "a\\xffb");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");         // an overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80"); // a surrogate
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80"); // above U+10FFFF
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");         // cut short
  CHECK(printable("line\nnext\tx\x1b[2J\x7f") == "line\\nnext\\tx\\x1b[2J\\x7f");
  CHECK(printable("line\nnext\xff", false) == "line\nnext\\xff");
  // Escaping twice changes nothing more: the escapes are plain ASCII.
  CHECK(printable(printable("a\xff\n")) == printable("a\xff\n"));
}

TEST_CASE("check_output_writable changes nothing it did not create") {
  temporary_directory dir{"training"};
  const auto existing = dir.path() / "metrics.csv";
  write_file(existing, "epoch,...\n1,2\n");
  check_output_writable(existing, "metrics");
  CHECK(read_file(existing) == "epoch,...\n1,2\n");
  const auto absent = dir.path() / "new.csv";
  check_output_writable(absent, "metrics");
  CHECK_FALSE(std::filesystem::exists(absent));
  check_output_writable("/dev/null", "metrics");
  CHECK(error_of<io_error>([&] { check_output_writable(dir.path(), "plot"); })
        == "cannot write the plot to '" + dir.path().string() + "': Is a directory");
  CHECK(error_of<io_error>([&] { check_output_writable(dir.path() / "a\nb" / "c", "plot"); })
        == "cannot write the plot to '" + dir.path().string()
               + "/a\\nb/c': No such file or directory");
}

TEST_CASE("plot_metrics reports a gnuplot that fails, hangs or writes nothing, and leaves nothing behind") {
  temporary_directory dir{"training"};
  const auto bin = dir.path() / "bin";
  std::filesystem::create_directory(bin);
  const auto fake = bin / "gnuplot";
  const char* old_path = std::getenv("PATH");
  const std::string saved_path = old_path != nullptr ? old_path : "";
  ::setenv("PATH", bin.c_str(), 1);
  const std::vector<epoch_metrics> rows{{1, 0.5, 0.8, 0.7, 1.0, 100.0}};
  const auto svg = dir.path() / "curves.svg";
  const auto temporaries = [] {
    int count = 0;
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
      count += e.path().filename().string().starts_with("train_fashion_mnist-plot-") ? 1 : 0;
    return count;
  };
  const auto before = temporaries();

  CHECK(plot_metrics(rows, svg) == "gnuplot is not installed (apt-get install gnuplot-nox)");
  ::setenv("PATH", (bin.string() + ":" + saved_path).c_str(), 1); // the fake first
  // It gets no argument and reads the data, then the commands, on stdin.
  write_file(fake, "#!/bin/sh\nread first\necho \"cannot plot $# files: $first\" >&2\nexit 3\n");
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  CHECK(plot_metrics(rows, svg)
        == "gnuplot failed (exit status 3): cannot plot 0 files: $metrics << EOD\n");
  // What it writes on stdout is the plot.
  write_file(fake, "#!/bin/sh\ncat >/dev/null\necho '<svg/>'\n");
  CHECK(plot_metrics(rows, svg) == "");
  CHECK(read_file(svg) == "<svg/>\n");
  std::filesystem::remove(svg);
  write_file(fake, "#!/bin/sh\nexit 0\n");
  CHECK(plot_metrics(rows, svg) == "gnuplot wrote no plot");
  write_file(fake, "#!/bin/sh\nexec sleep 30\n");
  CHECK(plot_metrics(rows, svg, std::chrono::milliseconds(300))
        == "gnuplot did not finish in 0.3 s and was killed");
  ::setenv("PATH", saved_path.c_str(), 1);
  CHECK_FALSE(std::filesystem::exists(svg));
  CHECK(temporaries() == before);
}

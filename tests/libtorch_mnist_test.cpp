// examples/libtorch_mnist (suite 'libtorch', built where libtorch is
// found): a libtorch model's gradients summed through lockstep via DLPack.
// On made-up Fashion-MNIST files (fashion_mnist_files.hpp): the sum lands
// in libtorch's own gradient buffers; replicas in one process train to one
// replica's weights within float tolerance; two workers under lockstep-run
// report one process's figures; bad input is a clear error.

#include "child_process.hpp"
#include "fashion_mnist_files.hpp"
#include "file_support.hpp"
#include "training.hpp"

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace libtorch_mnist;

namespace {

/// 256 training images (8 steps of global batch 32) and 64 test images.
struct workspace {
  temporary_directory dir{"libtorch_mnist"};
  workspace() { write_data(data(), 256, 64); }
  fs::path data() const { return dir.path() / "data"; }
};

training_config short_run(int replicas) {
  training_config config;
  config.replicas = replicas;
  config.epochs = 2;
  config.global_batch = 32;
  return config;
}

training_result train_with(int replicas, const training_data& data) {
  const lockstep::mirrored_strategy strategy{lockstep::cpu_devices(replicas)};
  return train(strategy, short_run(replicas), data);
}

double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].sizes() == b[i].sizes());
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

struct outcome {
  int status = -1;
  std::string out;
  std::string err;
};

/// The example with `args`; `workers` > 0: that many under lockstep-run.
outcome run_example(const std::vector<std::string>& args, int workers = 0) {
  static temporary_directory logs{"libtorch_mnist_logs"};
  static int count = 0;
  const char* program = std::getenv("LIBTORCH_MNIST");
  REQUIRE_MESSAGE(program != nullptr, "set LIBTORCH_MNIST to the built example (meson does)");
  std::vector<std::string> argv{program};
  if (workers > 0) {
    const char* launcher = std::getenv("LOCKSTEP_RUN");
    REQUIRE_MESSAGE(launcher != nullptr, "set LOCKSTEP_RUN to the built lockstep-run (meson does)");
    argv.insert(argv.begin(), {launcher, "-n", std::to_string(workers)});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  const auto out = logs.path() / ("out." + std::to_string(count));
  const auto err = logs.path() / ("err." + std::to_string(count++));
  const auto exit = run_child_process(
      {.argv = argv, .out = out, .err = err, .limit = std::chrono::seconds(120)});
  REQUIRE_FALSE(exit.timed_out);
  return {exit.status, read_file(out), read_file(err)};
}

/// Each "epoch N: ..." line's train loss, train accuracy and test accuracy.
std::vector<std::vector<double>> epoch_figures_of(const std::string& out) {
  const std::regex line{R"(epoch \d+: train loss ([0-9.]+), train accuracy ([0-9.]+), )"
                        R"(test accuracy ([0-9.]+),)"};
  std::vector<std::vector<double>> figures;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it)
    figures.push_back({std::stod((*it)[1]), std::stod((*it)[2]), std::stod((*it)[3])});
  return figures;
}

} // namespace

TEST_CASE("all_reduce_gradients sums libtorch's gradients in their own buffers") {
  const lockstep::mirrored_strategy strategy{lockstep::cpu_devices(3)};
  std::vector<mlp_module> models;
  for (int r = 0; r < 3; ++r)
    models.emplace_back(std::vector<std::int64_t>{4, 3, 2});
  std::vector<std::vector<void*>> before(3);
  const auto sums = strategy.run([&](lockstep::replica_context& ctx) {
    const auto r = ctx.replica_id_in_sync_group();
    auto& model = models[r];
    const auto out = model->forward(torch::ones({1, 4}));
    out.sum().backward(); // allocates the gradients
    for (auto& p : model->parameters()) {
      p.mutable_grad().fill_(static_cast<double>(r + 1));
      before[r].push_back(p.grad().data_ptr());
    }
    auto stats = lockstep::tensor::from<double>({1.0, 10.0 * static_cast<double>(r)});
    const bool in_place = all_reduce_gradients(ctx, *model, stats);
    std::vector<double> seen{in_place ? 1.0 : 0.0, stats.data<double>()[0], stats.data<double>()[1]};
    return lockstep::tensor::from<double>(seen);
  });
  for (int r = 0; r < 3; ++r) {
    const auto seen = sums[r].data<double>();
    CHECK(seen[0] == 1.0); // in place
    CHECK(seen[1] == 3.0);
    CHECK(seen[2] == 30.0);
    const auto parameters = models[r]->parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      CHECK(parameters[i].grad().data_ptr() == before[r][i]);
      CHECK(parameters[i].grad().eq(6.0).all().item<bool>()); // 1 + 2 + 3
    }
  }
}

TEST_CASE("replicas in one process train to one replica's weights") {
  workspace w;
  const auto data = to_torch(lockstep::load_mnist(w.data()));
  const auto one = train_with(1, data);
  const auto two = train_with(2, data);
  const auto four = train_with(4, data);
  REQUIRE(one.global_step == 16);
  CHECK(two.global_step == 16);
  CHECK(four.global_step == 16);
  CHECK(one.gradients_in_place);
  CHECK(two.gradients_in_place);
  CHECK(four.gradients_in_place);

  // Training moved the weights, so agreeing is not agreeing on the start.
  auto initial = initial_model(short_run(1).layers, short_run(1).seed);
  std::vector<torch::Tensor> start;
  for (const auto& p : initial->parameters())
    start.push_back(p.detach());
  CHECK(max_difference(one.weights, start) > 1e-3);

  CHECK(max_difference(one.weights, two.weights) < 1e-4);
  CHECK(max_difference(one.weights, four.weights) < 1e-4);
  for (std::size_t e = 0; e < one.epochs.size(); ++e) {
    CHECK(two.epochs[e].train_loss == doctest::Approx(one.epochs[e].train_loss).epsilon(1e-4));
    CHECK(two.epochs[e].train_accuracy == doctest::Approx(one.epochs[e].train_accuracy));
  }
}

TEST_CASE("two workers under lockstep-run report one process's figures with 2 replicas") {
  workspace w;
  const std::vector<std::string> common{"--data-dir", w.data().string(), "--global-batch", "32",
                                        "--epochs", "2"};
  auto with_replicas = common;
  with_replicas.insert(with_replicas.end(), {"--replicas", "2"});
  const auto one = run_example(with_replicas);
  INFO("one process: ", one.out, one.err);
  REQUIRE(one.status == 0);
  const auto workers = run_example(common, 2);
  INFO("two workers: ", workers.out, workers.err);
  REQUIRE(workers.status == 0);

  const auto expected = epoch_figures_of(one.out);
  const auto got = epoch_figures_of(workers.out);
  REQUIRE(expected.size() == 2);
  REQUIRE(got.size() == 2); // the chief alone reports
  for (std::size_t e = 0; e < 2; ++e)
    for (std::size_t k = 0; k < 3; ++k)
      CHECK(got[e][k] == doctest::Approx(expected[e][k]).epsilon(1e-5));
  CHECK(contains(one.out, "2 replicas in sync"));
  CHECK(contains(workers.out, "2 replicas in sync"));
  CHECK(contains(workers.out, "gradients reduced in place: yes"));
}

TEST_CASE("bad input is a clear error") {
  workspace w;
  const auto data = to_torch(lockstep::load_mnist(w.data()));

  SUBCASE("images the model cannot take") {
    temporary_directory small{"libtorch_mnist_small"};
    write_idx(small.path() / "train-images-idx3-ubyte", {40, 14, 14}, std::string(40 * 196, '\1'));
    write_idx(small.path() / "train-labels-idx1-ubyte", {40}, std::string(40, '\2'));
    write_idx(small.path() / "t10k-images-idx3-ubyte", {10, 14, 14}, std::string(10 * 196, '\1'));
    write_idx(small.path() / "t10k-labels-idx1-ubyte", {10}, std::string(10, '\2'));
    const auto small_data = to_torch(lockstep::load_mnist(small.path()));
    CHECK_THROWS_WITH_AS(train_with(1, small_data),
                         "libtorch_mnist: training images are 40x196; the model takes "
                         "float32 [n, 784] (28x28 images)",
                         lockstep::value_error);
    const auto run = run_example({"--data-dir", small.path().string()});
    CHECK(run.status == 1);
    CHECK(contains(run.err, "the model takes float32 [n, 784]"));
  }
  SUBCASE("labels outside the classes") {
    auto bad = data;
    bad.train_labels = data.train_labels.clone();
    bad.train_labels[3] = 12;
    CHECK_THROWS_WITH_AS(train_with(1, bad),
                         "libtorch_mnist: training labels span [0, 12]; the model has classes 0 to 9",
                         lockstep::value_error);
  }
  SUBCASE("a global batch the replicas do not divide") {
    const lockstep::mirrored_strategy strategy{lockstep::cpu_devices(3)};
    CHECK_THROWS_WITH_AS(train(strategy, short_run(3), data),
                         "libtorch_mnist: the global batch (32) must be a positive multiple of the "
                         "replicas in sync (3)",
                         lockstep::value_error);
  }
  SUBCASE("a missing data directory, a bad command line") {
    const auto missing = run_example({"--data-dir", (w.dir.path() / "nowhere").string()});
    CHECK(missing.status == 1);
    CHECK(contains(missing.err, "nowhere"));
    const auto usage = run_example({"--replicas", "0"});
    CHECK(usage.status == 2);
    CHECK(contains(usage.err, "--replicas: expected a number in [1, 4095], got '0'"));
  }
}

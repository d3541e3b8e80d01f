// examples/pod_fashion_mnist's split model: the main job's trainer with
// layer 1 on logical core 0 and the later layers and the loss on core 1 of
// a pod of 2 replicas x 2 cores gives, step for step, the weights of the
// unsplit model on mirrored_strategy over the replicas' core-0 devices, bit
// for bit; host loops of K steps (steps_per_run) give those of one step per
// call. The data is small and synthetic, so the test needs no download.
// The built program (POD_FASHION_MNIST) is driven as a child process: its
// command line (--pod-devices, --replicas refused) and a pod of 2 hosts
// under lockstep-run (LOCKSTEP_RUN) against one process of the same
// replicas, on made-up IDX files; hosts with different --pod-devices fail
// the join.

#include "mlp.hpp"
#include "split_model.hpp"
#include "trainer.hpp"

#include "fashion_mnist_files.hpp"
#include "file_support.hpp"
#include "worker_processes.hpp"

#include "lockstep/lockstep.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
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

namespace fs = std::filesystem;

/// How a run of the program ended: its exit status (-1 if it did not exit)
/// and what it printed, stdout and stderr together.
struct outcome {
  int status = -1;
  std::string out;
};

/// Runs the program (POD_FASHION_MNIST; meson test sets it) with `args`,
/// without the cluster variables of any launcher the suite may run under;
/// `hosts` > 0: that many copies under lockstep-run (LOCKSTEP_RUN), a pod
/// of that many hosts. A run past 60 s is killed and fails the test.
outcome run_program(const std::vector<std::string>& args, int hosts = 0) {
  static temporary_directory logs{"pod_fashion_mnist_logs"};
  static int count = 0;
  std::vector<std::string> argv{test_program("POD_FASHION_MNIST")};
  if (hosts > 0)
    argv.insert(argv.begin(), {test_program("LOCKSTEP_RUN"), "-n", std::to_string(hosts)});
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<process> run{
      spawn(argv, environment_with({}), logs.path() / ("out." + std::to_string(count++)))};
  wait_all(run, std::chrono::seconds(60));
  const auto& p = run[0];
  return {p.status && WIFEXITED(*p.status) ? WEXITSTATUS(*p.status) : -1, p.text()};
}

/// A metrics row's figures: epoch, train loss, train accuracy, test
/// accuracy (not the times).
struct figures {
  int epoch = 0;
  double loss = 0;
  double accuracy = 0;
  double test_accuracy = 0;
};

std::vector<figures> metrics_rows(const fs::path& csv) {
  std::istringstream in{read_file(csv)};
  std::string line;
  std::getline(in, line); // the header
  std::vector<figures> rows;
  while (std::getline(in, line)) {
    figures f;
    char c1 = 0, c2 = 0, c3 = 0;
    std::istringstream fields{line};
    fields >> f.epoch >> c1 >> f.loss >> c2 >> f.accuracy >> c3 >> f.test_accuracy;
    REQUIRE_MESSAGE((fields && c1 == ',' && c2 == ',' && c3 == ','), "not a metrics row: " << line);
    rows.push_back(f);
  }
  return rows;
}

} // namespace

TEST_CASE("pod_fashion_mnist's usage is its own: its name, --pod-devices, no --replicas, which "
          "it refuses") {
  const auto help = run_program({"--help"});
  CHECK(help.status == 0);
  CHECK(help.out.rfind("usage: pod_fashion_mnist [options]\n", 0) == 0);
  CHECK(help.out.find("--replicas") == std::string::npos);
  CHECK(contains(help.out, "  --pod-devices N       virtual CPU devices per host, even, 2 to 4094:"
                           " N/2 replicas of 2 logical cores; default 4\n"));
  CHECK(contains(help.out, "--steps-per-call K sets the pod's steps_per_run"));
  CHECK(contains(help.out, "each worker process is a host: H*N/2 replicas"));
  const auto refused = run_program({"--replicas", "3"});
  CHECK(refused.status == 2);
  CHECK(contains(refused.out, "pod_fashion_mnist: --replicas: the pod's replicas are set by"
                              " --pod-devices N (N/2 replicas of 2 logical cores per host)\n"));
  CHECK(contains(refused.out, "usage: pod_fashion_mnist"));
}

TEST_CASE("a bad --pod-devices exits 2 with the usage, naming the problem") {
  const std::string expected = "pod_fashion_mnist: --pod-devices: expected an even whole number"
                               " in [2, 4094] (each replica has 2 logical cores), got '";
  for (const std::string value : {"3", "0", "1", "-2", "4096", "4x", "", " 4", "2.0", "1e1"}) {
    CAPTURE(value);
    // The data directory does not exist: the command line is refused first.
    const auto result = run_program({"--pod-devices", value, "--data-dir", "no-such-dir"});
    CHECK(result.status == 2);
    CHECK(contains(result.out, expected + value + "'\n"));
    CHECK(contains(result.out, "usage: pod_fashion_mnist"));
  }
  const auto missing = run_program({"--epochs", "1", "--pod-devices"});
  CHECK(missing.status == 2);
  CHECK(contains(missing.out, "pod_fashion_mnist: --pod-devices: missing value\n"));
}

TEST_CASE("a pod of 2 hosts x 4 devices under lockstep-run trains as one process of 8 devices") {
  // 256 training images (8 global batches of 32) and 32 test images; both
  // runs have 4 replicas of 2 logical cores and 8 examples per replica.
  const temporary_directory dir{"pod_fashion_mnist"};
  const auto data = dir.path() / "data";
  write_data(data, 256, 32);
  const auto options = [&](const std::string& devices, const fs::path& metrics) {
    return std::vector<std::string>{"--pod-devices", devices,        "--data-dir",
                                    data.string(),   "--metrics",    metrics.string(),
                                    "--global-batch", "32",          "--epochs",
                                    "3",             "--seed",       "3"};
  };
  const auto alone_csv = dir.path() / "alone.csv";
  const auto alone = run_program(options("8", alone_csv));
  REQUIRE_MESSAGE(alone.status == 0, alone.out);
  CHECK(contains(alone.out, "pod of cpu_devices(8): 4 replicas x 2 cores"));

  const auto hosts_csv = dir.path() / "hosts.csv";
  const auto hosts = run_program(options("4", hosts_csv), 2);
  REQUIRE_MESSAGE(hosts.status == 0, hosts.out);
  CHECK(contains(hosts.out, "[0] Fashion-MNIST from "));
  CHECK(contains(hosts.out, "pod of 2 hosts x cpu_devices(4): 4 replicas x 2 cores"));
  CHECK(contains(hosts.out, "[0] steps 24,"));
  CHECK_FALSE(contains(hosts.out, "[1] ")); // host 1 trains in silence: the chief reports

  const auto expected = metrics_rows(alone_csv);
  const auto rows = metrics_rows(hosts_csv);
  REQUIRE(expected.size() == 3);
  REQUIRE(rows.size() == expected.size());
  // The same global batches, each replica the same share, the same
  // initial weights: the numbers agree within float rounding. They may
  // differ in the last bits because the sums associate differently: the
  // gradients and the epoch's figures are summed over each host's 2
  // replicas first, then across the hosts through the ring, where one
  // process sums its 4 replicas in one go. The losses are float32 sums, so
  // allow 1e-5 on a loss near 2.3 (the CSV's 6 decimals); an accuracy may
  // differ by one example at most (a prediction on a near tie).
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    CHECK(rows[i].epoch == expected[i].epoch);
    CHECK(std::abs(rows[i].loss - expected[i].loss) <= 1e-5);
    CHECK(std::abs(rows[i].accuracy - expected[i].accuracy) <= 1.0 / 256 + 1e-6);
    CHECK(std::abs(rows[i].test_accuracy - expected[i].test_accuracy) <= 1.0 / 32 + 1e-6);
  }
  // Training moved the loss: the comparison is of a run that learned.
  CHECK(expected[2].loss != expected[0].loss);
}

TEST_CASE("a pod of 2 hosts: the chief alone saves checkpoints, and both hosts resume from "
          "them") {
  const temporary_directory dir{"pod_fashion_mnist"};
  const auto data = dir.path() / "data";
  write_data(data, 256, 32);
  const auto checkpoints = dir.path() / "ckpt";
  const auto options = [&](const std::string& epochs, const fs::path& metrics,
                           bool checkpointed) {
    std::vector<std::string> all{"--data-dir", data.string(), "--metrics", metrics.string(),
                                 "--global-batch", "32", "--seed", "3", "--epochs", epochs};
    if (checkpointed)
      all.insert(all.end(), {"--checkpoint-dir", checkpoints.string()});
    return all;
  };
  const auto straight_csv = dir.path() / "straight.csv";
  const auto straight = run_program(options("2", straight_csv, false), 2);
  REQUIRE_MESSAGE(straight.status == 0, straight.out);

  const auto csv = dir.path() / "resumed.csv";
  const auto first = run_program(options("1", csv, true), 2);
  REQUIRE_MESSAGE(first.status == 0, first.out);
  CHECK(contains(first.out, "[0] saved " + (checkpoints / "ckpt-8.safetensors").string()));
  CHECK_FALSE(contains(first.out, "[1] "));
  // Host 1 must resume too: had it started again from step 0, the hosts'
  // collectives would not match and the run would fail.
  const auto second = run_program(options("2", csv, true), 2);
  REQUIRE_MESSAGE(second.status == 0, second.out);
  CHECK(contains(second.out, "[0] resumed from " + (checkpoints / "ckpt-8.safetensors").string()
                               + " at step 8"));
  CHECK(contains(second.out, "[0] saved " + (checkpoints / "ckpt-16.safetensors").string()));
  CHECK_FALSE(contains(second.out, "[1] "));
  // The resumed run keeps epoch 1's row, and its numbers are those of the
  // run that never stopped (the same pod, the same sums).
  const auto rows = metrics_rows(csv);
  const auto expected = metrics_rows(straight_csv);
  REQUIRE(rows.size() == 2);
  REQUIRE(expected.size() == 2);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    CHECK(rows[i].epoch == expected[i].epoch);
    CHECK(rows[i].loss == expected[i].loss);
    CHECK(rows[i].accuracy == expected[i].accuracy);
    CHECK(rows[i].test_accuracy == expected[i].test_accuracy);
  }
}

TEST_CASE("hosts started with different --pod-devices fail the join on every host, naming it") {
  const temp_folder folder;
  write_data(folder.path() / "data", 256, 32);
  const int base = free_ports(2);
  std::vector<process> hosts;
  for (const int rank : {0, 1})
    hosts.push_back(spawn({test_program("POD_FASHION_MNIST"), "--pod-devices", rank == 0 ? "4" : "2",
                           "--data-dir", (folder.path() / "data").string(), "--metrics",
                           (folder.path() / "metrics.csv").string(), "--global-batch", "32",
                           "--epochs", "1"},
                          environment_with({tf_config(base, 2, static_cast<std::size_t>(rank)),
                                            "LOCKSTEP_CLUSTER_TOKEN=pod-test-token-0123456789",
                                            "LOCKSTEP_JOB_ID=pod-fashion-mnist-test"}),
                          folder.path() / ("host" + std::to_string(rank) + ".txt")));
  wait_all(hosts, std::chrono::seconds(60));
  for (const auto& host : hosts) {
    const auto text = host.text();
    CHECK_MESSAGE(host.exited_with(1), host.how() << "\n" << text); // not 75: no restart
    CHECK_MESSAGE(contains(text, "the workers' settings differ (every worker must run with the"
                                 " same): replicas per worker is \"2\" on worker 0; \"1\" on"
                                 " worker 1. --pod-devices is \"4\" on worker 0; \"2\" on"
                                 " worker 1"),
                  text);
  }
}

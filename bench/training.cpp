// training: examples per second of the training step of the main job (MLP
// 784-256-128-100-10, Adam, softmax cross-entropy) through a mirrored
// strategy with N replicas, next to the same model code run in one thread
// with no strategy at all (a plain loop over the same batches: gradients of
// the global batch, Adam on plain buffers), measured in the same run, arms
// interleaved. Eigen is single-threaded in both arms (the library is built
// with EIGEN_DONT_PARALLELIZE): the replicas are the parallelism.
//
// The data is random, shaped like Fashion-MNIST: the cost of a step does not
// depend on the values. A lockstep arm times the steps after the first call
// (so strategy and variable creation, the first step's allocations and the
// end-of-epoch test are outside the window), from the observer's callbacks.
//
// Targets (issue 5): with 1 replica, at least 0.9x the plain loop; with 2
// replicas on 2 cores, at least 1.6x the 1-replica figure, at the same
// global batch.
//
// The timeline's cost (issue 16): the main job's setting (--timeline-cost
// N replicas, 10 steps per call) with runtime_options::timeline off and
// on, in turn within each repetition (the order swapped every repetition);
// the step time with it on over the step time with it off, per
// repetition; target: the median of those paired ratios at most 1.03.

#include "mlp.hpp"
#include "optimizer.hpp"
#include "trainer.hpp"

#include "bench_support.hpp"

#include "lockstep/lockstep.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace fashion_mnist;
using lockstep::bench::parse_count;
using lockstep::bench::parse_flags;
using lockstep::bench::parse_list;
using lockstep::bench::summarize;
using clock_type = std::chrono::steady_clock;

namespace {

/// Issue 5's targets: 1 replica against the plain loop, 2 replicas against
/// 1 replica at the same steps per call.
constexpr double one_replica_target = 0.9;
constexpr double two_replica_target = 1.6;
/// Issue 16's: the step time with the timeline on over off.
constexpr double timeline_cost_target = 1.03;
constexpr std::size_t timeline_steps_per_call = 10;

constexpr std::string_view usage = R"(usage: training [options]
  --replicas LIST        replica counts (default 1,2,4)
  --steps-per-call LIST  training steps per strategy call (default 1,10)
  --global-batch B       examples per step (default 256)
  --steps S              timed steps per repetition (default 200; a multiple of every steps per call)
  --reps R               repetitions, arms interleaved (default 5)
  --timeline-cost N      the timeline's cost at N replicas, 10 steps per call
                         (default 2; 0: not measured)
  --json FILE            also write {"rows": [...], "targets": [...]} to FILE
)";

struct options {
  std::vector<std::size_t> replicas{1, 2, 4};
  std::vector<std::size_t> steps_per_call{1, 10};
  std::int64_t global_batch = 256;
  std::int64_t steps = 200;
  std::size_t reps = 5;
  std::size_t timeline_cost_replicas = 2;
  std::string json;
};

options parse_options(int argc, char** argv) {
  options opts;
  parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view value) {
    if (flag == "--replicas")
      opts.replicas = parse_list(flag, value, 1);
    else if (flag == "--steps-per-call")
      opts.steps_per_call = parse_list(flag, value, 1);
    else if (flag == "--global-batch")
      opts.global_batch = static_cast<std::int64_t>(parse_count(flag, value));
    else if (flag == "--steps")
      opts.steps = static_cast<std::int64_t>(parse_count(flag, value));
    else if (flag == "--reps")
      opts.reps = parse_count(flag, value);
    else if (flag == "--timeline-cost")
      opts.timeline_cost_replicas = value == "0" ? 0 : parse_count(flag, value);
    else if (flag == "--json")
      opts.json = std::string(value);
    else
      return false;
    return true;
  });
  for (auto k : opts.steps_per_call)
    if (opts.steps % static_cast<std::int64_t>(k) != 0)
      throw std::invalid_argument("--steps must be a multiple of every --steps-per-call");
  if (opts.timeline_cost_replicas > 0
      && opts.steps % static_cast<std::int64_t>(timeline_steps_per_call) != 0)
    throw std::invalid_argument("--steps must be a multiple of 10 for --timeline-cost");
  return opts;
}

/// Random images in [0, 1) and labels in [0, 10), `count` of them.
training_data fashion_shaped_data(std::int64_t count) {
  std::mt19937_64 generator{1};
  std::vector<float> images(static_cast<std::size_t>(count * 784));
  for (auto& x : images)
    x = static_cast<float>(generator() >> 40) / static_cast<float>(1 << 24);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(count));
  for (auto& y : labels)
    y = static_cast<std::int64_t>(generator() % 10);
  training_data data;
  data.train_images = lockstep::tensor::from(images, {count, 784});
  data.train_labels = lockstep::tensor::from(labels, {count});
  data.test_images = lockstep::tensor::from(std::vector<float>(784 * 10, 0.5f), {10, 784});
  data.test_labels = lockstep::tensor::from(std::vector<std::int64_t>(10, 1), {10});
  return data;
}

/// Examples per second of `steps` steps of the plain loop after one warm-up step.
double plain_loop(const training_data& data, const options& opts) {
  const mlp_spec spec;
  const optimizer_options adam;
  auto parameters = initial_parameters(spec, 42);
  std::vector<std::vector<float>> m, v;
  for (const auto& p : parameters) {
    m.emplace_back(static_cast<std::size_t>(p.num_elements()), 0.0f);
    v.emplace_back(static_cast<std::size_t>(p.num_elements()), 0.0f);
  }
  const auto b = opts.global_batch;
  auto images = lockstep::tensor::uninitialized(lockstep::dtype::f32, {b, 784});
  auto labels = lockstep::tensor::uninitialized(lockstep::dtype::i64, {b});
  clock_type::time_point start;
  for (std::int64_t step = 0; step <= opts.steps; ++step) {
    if (step == 1)
      start = clock_type::now();
    // The batch is copied out of the data set, as the input pipeline does.
    std::copy_n(data.train_images.data<float>().data() + step * b * 784, b * 784,
                images.data<float>().data());
    std::copy_n(data.train_labels.data<std::int64_t>().data() + step * b, b,
                labels.data<std::int64_t>().data());
    auto result = loss_and_gradients(spec, parameters, images, labels, b);
    const auto step_size = adam_step_size(adam, step + 1);
    for (std::size_t i = 0; i < parameters.size(); ++i)
      adam_step(parameters[i].data<float>(), m[i], v[i], result.gradients[i].data<float>(),
                step_size, adam);
  }
  const auto seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  return static_cast<double>(opts.steps * b) / seconds;
}

/// Examples per second of `steps` steps through the strategy, after the
/// first call of `steps_per_call` steps.
double lockstep_training(const training_data& data, const options& opts, std::size_t replicas,
                         std::size_t steps_per_call) {
  training_config config;
  config.replicas = static_cast<int>(replicas);
  config.global_batch = opts.global_batch;
  config.steps_per_call = static_cast<int>(steps_per_call);
  config.max_steps = opts.steps + static_cast<std::int64_t>(steps_per_call);
  std::int64_t first_done = 0;
  clock_type::time_point start, end;
  training_observer observer;
  observer.on_progress = [&](const step_progress& progress) {
    if (first_done == 0) {
      first_done = progress.step;
      start = clock_type::now();
    }
    end = clock_type::now();
  };
  const auto result = train(config, data, observer);
  const auto timed = result.global_step - first_done;
  return static_cast<double>(timed * opts.global_batch)
         / std::chrono::duration<double>(end - start).count();
}

/// lockstep_training with runtime_options::timeline writing to `path`
/// (empty: off); the options are put back afterwards.
double with_timeline(const std::string& path, const training_data& data, const options& opts,
                     std::size_t replicas) {
  struct timeline_set {
    lockstep::runtime_options previous = lockstep::get_runtime_options();
    explicit timeline_set(const std::string& path) {
      auto changed = previous;
      changed.timeline = path;
      lockstep::set_runtime_options(changed);
    }
    ~timeline_set() { lockstep::set_runtime_options(previous); }
  } set{path};
  return lockstep_training(data, opts, replicas, timeline_steps_per_call);
}

/// One entry of the --json "targets" array, as the other benchmarks write it.
nlohmann::json target(const std::string& what, double measured, double limit, bool at_least,
                      const char* unit) {
  return {{"target", what}, {"measured", measured}, {"limit", limit}, {"at_least", at_least},
          {"unit", unit}, {"pass", at_least ? measured >= limit : measured <= limit}};
}

} // namespace

int main(int argc, char** argv) {
  try {
    const auto opts = parse_options(argc, argv);
    keep_freed_memory(); // both arms
    const auto max_call = *std::max_element(opts.steps_per_call.begin(), opts.steps_per_call.end());
    const auto data = fashion_shaped_data((opts.steps + static_cast<std::int64_t>(max_call) + 1)
                                  * opts.global_batch);
    std::printf("training: examples/s of the MLP 784-256-128-100-10 Adam step, global batch "
                "%lld, %lld timed steps, median of %zu reps, arms interleaved; baseline: the "
                "same model code in one thread, no strategy\n\n",
                static_cast<long long>(opts.global_batch), static_cast<long long>(opts.steps),
                opts.reps);
    std::vector<double> baseline;
    std::vector<std::vector<double>> arms(opts.replicas.size() * opts.steps_per_call.size());
    std::vector<double> timeline_ratios; // step time on / off, per repetition
    const auto trace_path = (std::filesystem::temp_directory_path()
                             / ("lockstep-bench-timeline." + std::to_string(::getpid()) + ".json"))
                              .string();
    for (std::size_t rep = 0; rep < opts.reps; ++rep) {
      baseline.push_back(plain_loop(data, opts));
      std::size_t arm = 0;
      for (auto n : opts.replicas)
        for (auto k : opts.steps_per_call)
          arms[arm++].push_back(lockstep_training(data, opts, n, k));
      if (opts.timeline_cost_replicas > 0) {
        const auto n = opts.timeline_cost_replicas;
        double off = 0;
        double on = 0;
        if (rep % 2 == 0) {
          off = with_timeline("", data, opts, n);
          on = with_timeline(trace_path, data, opts, n);
        } else {
          on = with_timeline(trace_path, data, opts, n);
          off = with_timeline("", data, opts, n);
        }
        timeline_ratios.push_back(off / on); // rates: the step time's ratio inverted
      }
    }
    std::filesystem::remove(trace_path);
    const auto base = summarize(baseline).median;
    // rates[{n, k}]: the median examples/s of n replicas at k steps per call.
    std::map<std::pair<std::size_t, std::size_t>, double> rates;
    std::size_t arm = 0;
    for (auto n : opts.replicas)
      for (auto k : opts.steps_per_call)
        rates[{n, k}] = summarize(arms[arm++]).median;
    const auto one_replica = [&](std::size_t k) {
      const auto it = rates.find({1, k});
      return it == rates.end() ? 0.0 : it->second;
    };
    std::printf("| replicas | steps per call | examples/s | plain loop examples/s | vs plain loop "
                "| vs 1 replica, same steps per call |\n|---:|---:|---:|---:|---:|---:|\n");
    std::printf("| (plain loop) | | %.0f | %.0f | 1.00 | |\n", base, base);
    nlohmann::json rows = nlohmann::json::array();
    nlohmann::json targets = nlohmann::json::array();
    std::vector<std::string> verdicts;
    for (const auto& [key, rate] : rates) {
      const auto [n, k] = key;
      const auto vs_one = one_replica(k) > 0 ? rate / one_replica(k) : 0.0;
      std::printf("| %zu | %zu | %.0f | %.0f | %.2f | %s |\n", n, k, rate, base, rate / base,
                  vs_one > 0 ? std::to_string(vs_one).substr(0, 4).c_str() : "");
      nlohmann::json row{{"replicas", n}, {"steps_per_call", k}, {"examples_per_s", rate},
                         {"baseline_examples_per_s", base}, {"ratio", rate / base}};
      if (vs_one > 0)
        row["vs_one_replica"] = vs_one;
      rows.push_back(row);
      char line[160];
      if (n == 1) {
        std::snprintf(line, sizeof line, "| 1 replica, %zu steps per call: vs the plain loop | "
                      "%.2fx | >= %.1fx | %s |", k, rate / base, one_replica_target,
                      rate / base >= one_replica_target ? "pass" : "FAIL");
        verdicts.push_back(line);
        targets.push_back(target("1 replica, " + std::to_string(k)
                                   + " steps per call: examples/s vs the plain loop",
                                 rate / base, one_replica_target, true, "x"));
      } else if (n == 2 && vs_one > 0) {
        std::snprintf(line, sizeof line, "| 2 replicas, %zu steps per call: vs 1 replica | "
                      "%.2fx | >= %.1fx | %s |", k, vs_one, two_replica_target,
                      vs_one >= two_replica_target ? "pass" : "FAIL");
        verdicts.push_back(line);
        targets.push_back(target("2 replicas, " + std::to_string(k)
                                   + " steps per call: examples/s vs 1 replica",
                                 vs_one, two_replica_target, true, "x"));
      }
    }
    if (!timeline_ratios.empty()) {
      const auto cost = summarize(timeline_ratios);
      std::printf("\ntimeline (runtime_options::timeline, default window) at %zu replicas, %zu "
                  "steps per call: step time on / off, per repetition:",
                  opts.timeline_cost_replicas, timeline_steps_per_call);
      for (const auto r : timeline_ratios)
        std::printf(" %.3f", r);
      std::printf("; median %.3f\n", cost.median);
      char line[200];
      std::snprintf(line, sizeof line, "| timeline on, %zu replicas: step time vs off (median of "
                    "%zu paired ratios) | %.3fx | <= %.2fx | %s |", opts.timeline_cost_replicas,
                    timeline_ratios.size(), cost.median, timeline_cost_target,
                    cost.median <= timeline_cost_target ? "pass" : "FAIL");
      verdicts.push_back(line);
      targets.push_back(target("timeline on, " + std::to_string(opts.timeline_cost_replicas)
                                 + " replicas, 10 steps per call: step time vs off (median of "
                                   "paired ratios)",
                               cost.median, timeline_cost_target, false, "x"));
    }
    std::printf("\n| target | measured | limit | |\n|---|---:|---:|---|\n");
    for (const auto& line : verdicts)
      std::printf("%s\n", line.c_str());
    if (!opts.json.empty()) {
      lockstep::bench::write_json_file(
          opts.json, nlohmann::json{{"benchmark", "training"}, {"global_batch", opts.global_batch},
                                    {"rows", rows}, {"targets", targets}}.dump(2));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "training: %s\n", e.what());
    return 1;
  }
}

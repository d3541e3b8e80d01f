// variables: what a training step's variable updates cost, next to plain
// loops on plain buffers.
//
// How it works. For each cell (K variables of S bytes on N devices) the
// benchmark builds a mirrored_strategy over cpu_devices(N) with K float32
// variables and one mirrored gradient per variable, and a baseline with the
// same buffers as plain arrays and N persistent threads, one per device (the
// calling thread itself when N = 1, as lockstep applies a one-copy
// variable's writes on the caller). A step applies `v -= lr * g` to every
// copy of every variable:
//
//   lockstep  K calls of strategy.extended().update(var, fn, grad), each
//             posted to the variable's copies (variable actors on their
//             devices' executors), then synchronize();
//   baseline  the caller wakes the N threads; each runs the same loop
//             over its K buffers; the caller waits for all N.
//
// Repetitions of the two arms alternate; the table shows the median time
// per step of each and their ratio, against a target of lockstep <= 1.5x
// the baseline for variables of 64 KiB and more. Cells with K*S*N above
// --limit bytes are skipped (each cell holds 2*K*S*N bytes per arm).

#include "lockstep/lockstep.hpp"

#include "bench_support.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sched.h>

namespace {

using lockstep::bench::parse_count;
using lockstep::bench::parse_flags;
using lockstep::bench::parse_list;
using lockstep::bench::pin_to;
using lockstep::bench::size_string;
using lockstep::bench::summarize;
using clock_type = std::chrono::steady_clock;

constexpr double target_ratio = 1.5;
constexpr std::size_t target_min_bytes = 64 * 1024;
constexpr float learning_rate = 0.01f;

// -- options ------------------------------------------------------------------

struct options {
  std::vector<std::size_t> variables{10, 100, 1000};
  std::vector<std::size_t> sizes{1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22};
  std::vector<std::size_t> replicas{1, 2, 4};
  std::size_t reps = 5;
  std::size_t limit = std::size_t{1} << 30;
  std::vector<std::size_t> cpus;
  std::string json;
};

constexpr std::string_view usage = R"(usage: variables [options]
  --variables LIST  variable counts K (default 10,100,1000)
  --sizes LIST      bytes per variable S, multiples of 4 (default 1 KiB .. 4 MiB, x4)
  --replicas LIST   device counts N (default 1,2,4)
  --reps N          repetitions of each arm, interleaved (default 5)
  --limit BYTES     skip cells with K*S*N above this (default 1 GiB)
  --cpus LIST       run on these CPUs only
  --json FILE       also write {"rows": [...]} to FILE
)";

options parse_options(int argc, char** argv) {
  options opts;
  parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view value) {
    if (flag == "--variables")
      opts.variables = parse_list(flag, value, 1);
    else if (flag == "--sizes")
      opts.sizes = parse_list(flag, value, 1);
    else if (flag == "--replicas")
      opts.replicas = parse_list(flag, value, 1);
    else if (flag == "--reps")
      opts.reps = parse_count(flag, value);
    else if (flag == "--limit")
      opts.limit = parse_count(flag, value);
    else if (flag == "--cpus")
      opts.cpus = parse_list(flag, value, 0);
    else if (flag == "--json")
      opts.json = value;
    else
      return false;
    return true;
  });
  for (auto s : opts.sizes)
    if (s % 4 != 0)
      throw std::invalid_argument("--sizes: " + std::to_string(s) + " is not a multiple of 4");
  return opts;
}

// -- the baseline ---------------------------------------------------------------

/// The step's arithmetic on plain buffers.
void apply_gradient(float* __restrict value, const float* __restrict gradient, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    value[i] -= learning_rate * gradient[i];
}

/// N device threads (none for N = 1), each owning its copies of K buffers
/// and their gradients; `step` wakes them all and waits until each applied
/// every gradient once.
class thread_baseline {
public:
  thread_baseline(std::size_t devices, std::size_t variables, std::size_t floats)
    : floats_(floats), values_(devices), gradients_(devices) {
    for (std::size_t d = 0; d < devices; ++d)
      for (std::size_t k = 0; k < variables; ++k) {
        values_[d].emplace_back(floats, 1.0f);
        gradients_[d].emplace_back(floats, static_cast<float>(k % 7) + 1.0f);
      }
    if (devices > 1)
      for (std::size_t d = 0; d < devices; ++d)
        threads_.emplace_back([this, d] { device_loop(d); });
  }

  ~thread_baseline() {
    {
      std::lock_guard<std::mutex> lock{mutex_};
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_)
      t.join();
  }

  void step() {
    if (threads_.empty()) {
      apply(0);
      return;
    }
    std::unique_lock<std::mutex> lock{mutex_};
    ++generation_;
    pending_ = threads_.size();
    start_.notify_all();
    done_.wait(lock, [this] { return pending_ == 0; });
  }

  float first_value() const { return values_[0][0][0]; }

private:
  void apply(std::size_t device) {
    for (std::size_t k = 0; k < values_[device].size(); ++k)
      apply_gradient(values_[device][k].data(), gradients_[device][k].data(), floats_);
  }

  void device_loop(std::size_t device) {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock{mutex_};
    for (;;) {
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_)
        return;
      seen = generation_;
      lock.unlock();
      apply(device);
      lock.lock();
      if (--pending_ == 0)
        done_.notify_one();
    }
  }

  std::size_t floats_;
  std::vector<std::vector<std::vector<float>>> values_;
  std::vector<std::vector<std::vector<float>>> gradients_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  std::uint64_t generation_ = 0;
  std::size_t pending_ = 0;
  bool stop_ = false;
};

// -- the lockstep arm -----------------------------------------------------------

class lockstep_arm {
public:
  lockstep_arm(std::size_t devices, std::size_t variables, std::size_t floats)
    : strategy_(lockstep::cpu_devices(devices)) {
    auto scope = strategy_.scope();
    const auto shape = lockstep::shape_t{static_cast<std::int64_t>(floats)};
    for (std::size_t k = 0; k < variables; ++k) {
      variables_.emplace_back(lockstep::tensor::filled(lockstep::dtype::f32, shape, 1.0),
                              lockstep::variable_options{.name = "v" + std::to_string(k)});
      std::vector<lockstep::tensor> parts;
      for (const auto& d : variables_.back().devices())
        parts.push_back(lockstep::tensor::filled(lockstep::dtype::f32, shape,
                                                 static_cast<double>(k % 7) + 1.0, d));
      gradients_.emplace_back(std::move(parts));
    }
  }

  void step() {
    auto scope = strategy_.scope();
    auto& extended = strategy_.extended();
    for (std::size_t k = 0; k < variables_.size(); ++k)
      extended.update(
        variables_[k],
        [](lockstep::tensor& value, const lockstep::tensor& gradient) {
          lockstep::axpy_into(value, -learning_rate, gradient);
        },
        gradients_[k]);
    extended.synchronize();
  }

  float first_value() const { return variables_[0].value().at<float>(0); }

private:
  lockstep::mirrored_strategy strategy_;
  std::vector<lockstep::variable> variables_;
  std::vector<lockstep::mirrored<lockstep::tensor>> gradients_;
};

// -- measurement ------------------------------------------------------------------

struct row {
  std::size_t variables, bytes, replicas;
  bool skipped = false;
  double lockstep_us = 0, baseline_us = 0;
  double ratio() const { return lockstep_us / baseline_us; }
};

template <class Arm>
double time_steps(Arm& arm, std::size_t steps) {
  const auto start = clock_type::now();
  for (std::size_t i = 0; i < steps; ++i)
    arm.step();
  return std::chrono::duration<double, std::micro>(clock_type::now() - start).count()
         / static_cast<double>(steps);
}

row measure(std::size_t k, std::size_t bytes, std::size_t n, const options& opts) {
  row r{k, bytes, n};
  if (k * bytes * n > opts.limit) {
    r.skipped = true;
    return r;
  }
  const auto floats = bytes / 4;
  thread_baseline baseline{n, k, floats};
  lockstep_arm lockstep{n, k, floats};
  // Enough steps per repetition to move ~64 MiB of variables, at least 3.
  const auto steps = std::clamp<std::size_t>((std::size_t{64} << 20) / (k * bytes * n), 3, 2000);
  baseline.step(); // warm-up: page in, start threads
  lockstep.step();
  std::vector<double> ours, theirs;
  for (std::size_t rep = 0; rep < opts.reps; ++rep) {
    ours.push_back(time_steps(lockstep, steps));
    theirs.push_back(time_steps(baseline, steps));
  }
  // Both arms applied the same number of steps to the same start values.
  if (lockstep.first_value() != baseline.first_value())
    throw std::runtime_error("the arms disagree: lockstep " + std::to_string(lockstep.first_value())
                             + " vs baseline " + std::to_string(baseline.first_value()));
  r.lockstep_us = summarize(ours).median;
  r.baseline_us = summarize(theirs).median;
  return r;
}

void print_row(const row& r) {
  if (r.skipped) {
    std::printf("| %5zu | %7s | %2zu | %12s | %12s | %6s | %s |\n", r.variables,
                size_string(r.bytes).c_str(), r.replicas, "skipped", "skipped", "-",
                "K*S*N above --limit");
    return;
  }
  const bool targeted = r.bytes >= target_min_bytes;
  const double overhead = (r.lockstep_us - r.baseline_us) / static_cast<double>(r.variables);
  std::printf("| %5zu | %7s | %2zu | %12.1f | %12.1f | %6.2f | %s, %+.2f us/update |\n",
              r.variables, size_string(r.bytes).c_str(), r.replicas, r.lockstep_us,
              r.baseline_us, r.ratio(),
              targeted ? (r.ratio() <= target_ratio ? "ok" : "ABOVE TARGET") : "no target",
              overhead);
  std::fflush(stdout);
}

void write_json(const std::string& path, const std::vector<row>& rows, const options& opts) {
  nlohmann::json out;
  out["benchmark"] = "variables";
  out["target_ratio"] = target_ratio;
  out["target_min_bytes"] = target_min_bytes;
  out["reps"] = opts.reps;
  out["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j{{"variables", r.variables}, {"bytes", r.bytes}, {"replicas", r.replicas},
                     {"skipped", r.skipped}};
    if (!r.skipped) {
      j["lockstep_us"] = r.lockstep_us;
      j["baseline_us"] = r.baseline_us;
      j["ratio"] = r.ratio();
    }
    out["rows"].push_back(j);
  }
  lockstep::bench::write_json_file(path, out.dump(2));
}

} // namespace

int main(int argc, char** argv) {
  try {
    const auto opts = parse_options(argc, argv);
    if (!opts.cpus.empty())
      pin_to(opts.cpus);
    std::printf("variables: us per step (K updates of v -= lr*g on every copy), median of %zu "
                "reps; target lockstep <= %.1fx baseline for S >= 64 KiB\n\n",
                opts.reps, target_ratio);
    std::printf("| K     | S       | N  | lockstep us  | baseline us  | ratio  | verdict |\n");
    std::printf("|-------|---------|----|--------------|--------------|--------|---------|\n");
    std::vector<row> rows;
    for (auto n : opts.replicas)
      for (auto k : opts.variables)
        for (auto s : opts.sizes) {
          rows.push_back(measure(k, s, n, opts));
          print_row(rows.back());
        }
    if (!opts.json.empty())
      write_json(opts.json, rows, opts);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "variables: %s\n", e.what());
    return 1;
  }
}

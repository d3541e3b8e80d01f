// multi_step: host time per step of a multi-step loop against separate runs.
//
// How it works. For each replica count N, the benchmark builds a
// mirrored_strategy over cpu_devices(N) and distributes an endless dataset of
// tiny global batches (N float32 rows, one row per replica). Each repetition
// opens a fresh iterator and times `calls` calls of one arm:
//
//   baseline (a)  K separate steps: `iterator.next()` then `strategy.run` of
//                 a near-empty replica function, K times;
//   multi-step (b) one `experimental_run_steps_on_iterator` call of K steps
//                 with the same near-empty step function.
//
//   input only (c) K times `iterator.next()`, nothing run.
//
// Both (a) and (b) take the same steps from the same kind of iterator, so
// the input pipeline costs both the same; (b) makes one replica dispatch per
// K steps where (a) makes K. The figure is microseconds per step (elapsed /
// (calls * K)); the arms alternate (a, b, c, a, b, c, ...), and the table
// shows the median of each over the repetitions. The target is on host
// coordination per step: the time an arm spends beyond taking its input,
// (b) - (c) against (a) - (c), at most 0.5. The ratio of the whole times,
// (b)/(a), is shown beside it: with one replica a dispatch costs about a
// microsecond while the input actor makes a step in 2-3, so there the
// whole times mostly measure the input pipeline.
//
// Only the public API is used, as an application would.

#include "lockstep/lockstep.hpp"

#include "bench_support.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using lockstep::bench::parse_count;
using lockstep::bench::parse_flags;
using lockstep::bench::parse_list;
using lockstep::bench::pin_to;
using lockstep::bench::summarize;
using lockstep::bench::summary;
using clock_type = std::chrono::steady_clock;

/// A figure is acceptable when the multi-step loop takes at most this share
/// of the separate runs' time per step.
constexpr double target_ratio = 0.5;

// -- options ------------------------------------------------------------------

struct options {
  std::size_t steps = 10;
  std::size_t calls = 200;
  std::size_t reps = 11;
  std::size_t prefetch = 32;
  std::vector<std::size_t> replicas{1, 2, 4};
  std::vector<std::size_t> cpus;
  std::string json;
};

constexpr std::string_view usage = R"(usage: multi_step [options]
  --steps K        steps per multi-step call (default 10)
  --calls N        calls timed per repetition (default 200): N * K steps
  --reps N         repetitions of each arm, interleaved (default 11)
  --prefetch N     input_options::prefetch_depth of the iterators (default 32)
  --replicas LIST  comma-separated replica counts (default 1,2,4)
  --cpus LIST      run on these CPUs only (e.g. 0,1)
  --json FILE      also write {"rows": [...]} to FILE
)";

options parse_options(int argc, char** argv) {
  options opts;
  parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view value) {
    if (flag == "--steps")
      opts.steps = parse_count(flag, value);
    else if (flag == "--calls")
      opts.calls = parse_count(flag, value);
    else if (flag == "--reps")
      opts.reps = parse_count(flag, value);
    else if (flag == "--prefetch")
      opts.prefetch = parse_count(flag, value);
    else if (flag == "--replicas")
      opts.replicas = parse_list(flag, value, 1);
    else if (flag == "--cpus")
      opts.cpus = parse_list(flag, value, 0);
    else if (flag == "--json")
      opts.json = value;
    else
      return false;
    return true;
  });
  return opts;
}

// -- the two arms ---------------------------------------------------------------

double elapsed_us(clock_type::time_point since) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - since).count();
}

/// (a): K times `next()` and `run`; microseconds per step.
double separate_runs(const lockstep::strategy& s,
                     const lockstep::distributed_dataset<lockstep::tensor>& data,
                     const options& opts) {
  auto it = data.make_iterator();
  auto step = [](lockstep::replica_context&, const lockstep::tensor& mine) {
    if (mine.num_elements() < 0)
      throw std::logic_error("unreachable");
  };
  const auto start = clock_type::now();
  for (std::size_t c = 0; c < opts.calls; ++c)
    for (std::size_t k = 0; k < opts.steps; ++k) {
      auto x = it.next();
      if (!x)
        throw std::runtime_error("the endless dataset ended");
      s.run(step, *x);
    }
  return elapsed_us(start) / static_cast<double>(opts.calls * opts.steps);
}

/// (c): K times `next()`, nothing run; microseconds per step.
double input_only(const lockstep::distributed_dataset<lockstep::tensor>& data,
                  const options& opts) {
  auto it = data.make_iterator();
  const auto start = clock_type::now();
  for (std::size_t c = 0; c < opts.calls; ++c)
    for (std::size_t k = 0; k < opts.steps; ++k)
      if (!it.next())
        throw std::runtime_error("the endless dataset ended");
  return elapsed_us(start) / static_cast<double>(opts.calls * opts.steps);
}

/// (b): one experimental_run_steps_on_iterator of K steps; us per step.
double multi_step_calls(const lockstep::strategy& s,
                        const lockstep::distributed_dataset<lockstep::tensor>& data,
                        const options& opts) {
  auto it = data.make_iterator();
  auto step = [](lockstep::replica_context&, lockstep::multi_step_context&,
                 const lockstep::tensor& mine) {
    if (mine.num_elements() < 0)
      throw std::logic_error("unreachable");
  };
  const auto start = clock_type::now();
  for (std::size_t c = 0; c < opts.calls; ++c) {
    auto ctx = s.extended().experimental_run_steps_on_iterator(step, it, opts.steps);
    if (ctx.steps() != opts.steps)
      throw std::runtime_error("the endless dataset ended");
  }
  return elapsed_us(start) / static_cast<double>(opts.calls * opts.steps);
}

// -- statistics and output ------------------------------------------------------

struct row {
  std::size_t replicas;
  std::size_t steps_per_call;
  summary multi_step; // (b), us per step
  summary separate;   // (a)
  summary input;      // (c)
  double ratio() const { return multi_step.median / separate.median; }
  double coordination() const { return multi_step.median - input.median; }
  double baseline_coordination() const { return separate.median - input.median; }
  /// (b - c) / (a - c); infinite when (a) took no longer than its input.
  double coordination_ratio() const {
    return baseline_coordination() > 0 ? std::max(0.0, coordination()) / baseline_coordination()
                                       : std::numeric_limits<double>::infinity();
  }
};

row measure(std::size_t n, const options& opts) {
  lockstep::mirrored_strategy s{lockstep::cpu_devices(static_cast<int>(n))};
  std::vector<float> rows(n, 1.0f);
  auto batches = lockstep::dataset<lockstep::tensor>::from_tensor_slices(
                   lockstep::tensor::from(rows, {static_cast<std::int64_t>(n), 1}))
                   .batch(static_cast<std::int64_t>(n), true)
                   .repeat();
  lockstep::input_options input;
  input.prefetch_depth = opts.prefetch;
  auto data = s.experimental_distribute_dataset(batches, input);
  // One untimed repetition of each arm warms the replica threads and caches.
  (void) separate_runs(s, data, opts);
  (void) multi_step_calls(s, data, opts);
  (void) input_only(data, opts);
  std::vector<double> a, b, c;
  for (std::size_t rep = 0; rep < opts.reps; ++rep) {
    a.push_back(separate_runs(s, data, opts));
    b.push_back(multi_step_calls(s, data, opts));
    c.push_back(input_only(data, opts));
  }
  return {n, opts.steps, summarize(b), summarize(a), summarize(c)};
}

std::string range_string(const summary& s) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "[%.2f-%.2f]", s.min, s.max);
  return buf;
}

void print_row(const row& r) {
  std::printf("| %2zu | %2zu | %8.2f %-17s | %8.2f %-17s | %9.2f | %8.2f | %8.2f | %11.2f | "
              "%7.2f | %-7s |\n",
              r.replicas, r.steps_per_call, r.multi_step.median, range_string(r.multi_step).c_str(),
              r.separate.median, range_string(r.separate).c_str(), r.input.median,
              r.coordination(), r.baseline_coordination(),
              r.coordination_ratio(), r.ratio(),
              r.coordination_ratio() <= target_ratio ? "ok" : "ABOVE");
  std::fflush(stdout);
}

void write_json(const std::string& path, const std::vector<row>& rows, const options& opts) {
  nlohmann::json out;
  out["benchmark"] = "multi_step";
  out["target_ratio"] = target_ratio;
  out["reps"] = opts.reps;
  out["calls"] = opts.calls;
  out["prefetch_depth"] = opts.prefetch;
  out["rows"] = nlohmann::json::array();
  for (const auto& r : rows)
    out["rows"].push_back({{"replicas", r.replicas},
                           {"steps_per_call", r.steps_per_call},
                           {"us_per_step", r.multi_step.median},
                           {"baseline_us_per_step", r.separate.median},
                           {"input_us_per_step", r.input.median},
                           {"coordination_ratio", r.coordination_ratio()},
                           {"ratio", r.ratio()}});
  lockstep::bench::write_json_file(path, out.dump(2));
}

} // namespace

int main(int argc, char** argv) {
  try {
    const auto opts = parse_options(argc, argv);
    if (!opts.cpus.empty())
      pin_to(opts.cpus);
    std::printf("multi_step: us per step of a near-empty step, (b) one "
                "experimental_run_steps_on_iterator call of K steps, (a) K times next() + "
                "run(), (c) K times next() alone; median [min-max] of %zu interleaved reps of "
                "%zu calls; coordination = an arm's time beyond its input, (b-c) and (a-c); "
                "target (b-c)/(a-c) <= %.1f\n\n",
                opts.reps, opts.calls, target_ratio);
    std::printf("| N  | K  | (b) multi-step us/step     | (a) separate runs us/step  | "
                "(c) input | (b)-(c)  | (a)-(c)  | (b-c)/(a-c) | (b)/(a) | verdict |\n");
    std::printf("|----|----|----------------------------|----------------------------|"
                "----------:|---------:|---------:|------------:|--------:|---------|\n");
    std::vector<row> rows;
    for (auto n : opts.replicas) {
      rows.push_back(measure(n, opts));
      print_row(rows.back());
    }
    if (!opts.json.empty())
      write_json(opts.json, rows, opts);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multi_step: %s\n", e.what());
    return 1;
  }
}

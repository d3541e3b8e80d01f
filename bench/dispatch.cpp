// dispatch: what a `run` and a `merge_call` cost, next to plain threads.
//
// How it works. For each replica count N, the benchmark builds a
// mirrored_strategy over cpu_devices(N) and a baseline of N persistent
// std::threads woken by condition variables, with the calling thread as
// coordinator (the guide's variant (b), minus the extra coordinator thread).
// It then alternates repetitions of the two arms: lockstep, baseline,
// lockstep, baseline, ... Each repetition times
//
//   run         `iters` calls of run() with an empty replica function;
//   merge_call  `iters / merges` calls of run() whose replica function makes
//               `merges` merge_calls with an empty merge function.
//
// The figures are microseconds per call: run = elapsed / iters;
// merge_call = (time per run with `merges` merge_calls - time per empty run
// of the same repetition) / merges, so the dispatch of the enclosing run is
// not counted. The table shows the median over repetitions of each arm and
// the ratio of the medians, against a target of lockstep <= 2x baseline.
//
// Only the public API is used, as an application would.

#include "lockstep/lockstep.hpp"

#include "bench_support.hpp"

#include <algorithm>
#include <chrono>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>
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
using lockstep::bench::summarize;
using lockstep::bench::summary;
using clock_type = std::chrono::steady_clock;

/// A figure is acceptable when lockstep takes at most this many times the
/// baseline.
constexpr double target_ratio = 2.0;

// -- options ------------------------------------------------------------------

struct options {
  std::size_t iters = 2000;
  std::size_t reps = 11;
  std::size_t merges = 100;
  std::vector<std::size_t> replicas{1, 2, 4, 8};
  std::vector<std::size_t> cpus; // empty: every CPU the process may use
  std::string json;
};

constexpr std::string_view usage = R"(usage: dispatch [options]
  --iters N        calls timed per repetition (default 2000); the merge_call
                   arm makes N merge_calls in N/K runs
  --reps N         repetitions of each arm, interleaved (default 11)
  --merges K       merge_calls per run in the merge_call arm (default 100)
  --replicas LIST  comma-separated replica counts (default 1,2,4,8)
  --cpus LIST      run both arms on these CPUs only (e.g. 0): on a VM whose
                   idle vCPUs halt, a wake-up across CPUs costs ~50 us and
                   decides which arm is slower by where threads land
  --json FILE      also write the results as JSON to FILE
Environment: the LOCKSTEP_* variables of lockstep::runtime_options apply.
)";

std::string cpus_string(const std::vector<std::size_t>& cpus) {
  if (cpus.empty())
    return "all";
  std::string out;
  for (auto cpu : cpus) {
    if (!out.empty())
      out += ',';
    out += std::to_string(cpu);
  }
  return out;
}

options parse_options(int argc, char** argv) {
  options opts;
  parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view value) {
    if (flag == "--iters") {
      opts.iters = parse_count(flag, value);
    } else if (flag == "--reps") {
      opts.reps = parse_count(flag, value);
    } else if (flag == "--merges") {
      opts.merges = parse_count(flag, value);
    } else if (flag == "--replicas") {
      opts.replicas = parse_list(flag, value, 1);
    } else if (flag == "--cpus") {
      opts.cpus = parse_list(flag, value, 0);
    } else if (flag == "--json") {
      opts.json = value;
    } else {
      return false;
    }
    return true;
  });
  return opts;
}

// -- the baseline: plain threads and condition variables ------------------------

/// N persistent threads, one per replica, and the calling thread as
/// coordinator. `run` publishes the function and wakes every replica; a
/// replica in `merge_call` checks in and waits; when all N have checked in,
/// the coordinator runs replica 0's merge function and wakes them all with
/// the next merge generation (gather, merge, scatter). One mutex guards all
/// state; replicas wait on one condition variable, the coordinator on another;
/// notifications are sent after unlocking where the notifier does not wait
/// right away.
class thread_baseline {
public:
  using merge_function = std::function<void()>;

  /// What a replica function sees: its index and merge_call.
  class replica {
  public:
    replica(thread_baseline& owner, std::size_t index) : owner_(owner), index_(index) {}

    std::size_t index() const noexcept { return index_; }

    /// Blocks until every replica called merge_call and the coordinator ran
    /// the merge function (replica 0's).
    void merge_call(const merge_function& fn) { owner_.merge_call(index_, fn); }

  private:
    thread_baseline& owner_;
    std::size_t index_;
  };

  using replica_function = std::function<void(replica&)>;

  explicit thread_baseline(std::size_t n) : n_(n) {
    threads_.reserve(n);
    for (std::size_t r = 0; r < n; ++r)
      threads_.emplace_back([this, r] { replica_loop(r); });
  }

  ~thread_baseline() {
    {
      std::lock_guard<std::mutex> lock{mutex_};
      stop_ = true;
    }
    replicas_cv_.notify_all();
    for (auto& t : threads_)
      t.join();
  }

  thread_baseline(const thread_baseline&) = delete;
  thread_baseline& operator=(const thread_baseline&) = delete;

  /// Runs `fn` once on every replica thread; returns when all returned.
  void run(const replica_function& fn) {
    std::unique_lock<std::mutex> lock{mutex_};
    fn_ = &fn;
    finished_ = 0;
    ++run_generation_;
    lock.unlock();
    replicas_cv_.notify_all();
    lock.lock();
    for (;;) {
      coordinator_cv_.wait(lock, [this] { return finished_ + merging_ == n_; });
      if (finished_ == n_)
        return;
      if (finished_ > 0)
        throw std::logic_error("baseline: replicas made different numbers of merge_calls");
      (*merge_fn_)(); // cross-replica: all replicas wait
      merging_ = 0;
      ++merge_generation_;
      lock.unlock();
      replicas_cv_.notify_all();
      lock.lock();
    }
  }

private:
  void replica_loop(std::size_t r) {
    replica self{*this, r};
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock{mutex_};
    for (;;) {
      replicas_cv_.wait(lock, [&] { return stop_ || run_generation_ != seen; });
      if (stop_)
        return;
      seen = run_generation_;
      const auto* fn = fn_;
      lock.unlock();
      (*fn)(self);
      lock.lock();
      if (++finished_ + merging_ == n_)
        coordinator_cv_.notify_one();
    }
  }

  void merge_call(std::size_t r, const merge_function& fn) {
    std::unique_lock<std::mutex> lock{mutex_};
    if (r == 0)
      merge_fn_ = &fn;
    const auto generation = merge_generation_;
    if (finished_ + ++merging_ == n_)
      coordinator_cv_.notify_one();
    replicas_cv_.wait(lock, [&] { return merge_generation_ != generation; });
  }

  const std::size_t n_;
  std::mutex mutex_;
  std::condition_variable replicas_cv_;
  std::condition_variable coordinator_cv_;
  const replica_function* fn_ = nullptr;
  const merge_function* merge_fn_ = nullptr;
  std::uint64_t run_generation_ = 0;
  std::uint64_t merge_generation_ = 0;
  std::size_t finished_ = 0;
  std::size_t merging_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// -- the two arms -----------------------------------------------------------------

/// Microseconds per call of one repetition.
struct sample {
  double run_us;
  double merge_us;
};

template <class F>
double time_us(std::size_t calls, F&& call) {
  const auto start = clock_type::now();
  for (std::size_t i = 0; i < calls; ++i)
    call();
  const std::chrono::duration<double, std::micro> elapsed = clock_type::now() - start;
  return elapsed.count();
}

/// Runs of the merge_call arm per repetition: `iters` merge_calls in all.
std::size_t merge_runs(const options& opts) {
  return std::max<std::size_t>(1, opts.iters / opts.merges);
}

sample measure_lockstep(const lockstep::mirrored_strategy& strategy, const options& opts,
                        std::size_t iters) {
  const auto merges = opts.merges;
  const auto runs = std::max<std::size_t>(1, iters / merges);
  const auto run_total = time_us(iters, [&] { strategy.run([] {}); });
  const auto merge_total = time_us(runs, [&] {
    strategy.run([merges](lockstep::replica_context& ctx) {
      for (std::size_t k = 0; k < merges; ++k)
        ctx.merge_call([] {});
    });
  });
  const auto run_us = run_total / static_cast<double>(iters);
  return {run_us, (merge_total / static_cast<double>(runs) - run_us) / static_cast<double>(merges)};
}

sample measure_baseline(thread_baseline& baseline, const options& opts, std::size_t iters) {
  const auto merges = opts.merges;
  const auto runs = std::max<std::size_t>(1, iters / merges);
  const thread_baseline::replica_function empty = [](thread_baseline::replica&) {};
  const thread_baseline::merge_function empty_merge = [] {};
  const thread_baseline::replica_function merging = [&](thread_baseline::replica& self) {
    for (std::size_t k = 0; k < merges; ++k)
      self.merge_call(empty_merge);
  };
  const auto run_total = time_us(iters, [&] { baseline.run(empty); });
  const auto merge_total = time_us(runs, [&] { baseline.run(merging); });
  const auto run_us = run_total / static_cast<double>(iters);
  return {run_us, (merge_total / static_cast<double>(runs) - run_us) / static_cast<double>(merges)};
}

// -- statistics and output ----------------------------------------------------------

struct row {
  std::string what;
  std::size_t replicas;
  summary lockstep;
  summary baseline;

  double ratio() const { return lockstep.median / baseline.median; }
  bool pass() const { return ratio() <= target_ratio; }
};

std::string range(const summary& s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%.1f-%.1f]", s.min, s.max);
  return buf;
}

void print_table(const std::vector<row>& rows) {
  std::printf("%-10s %8s %12s %12s %7s %6s  %-17s %-17s\n", "what", "replicas", "lockstep_us",
              "baseline_us", "ratio", "<=2x", "lockstep_range", "baseline_range");
  for (const auto& r : rows)
    std::printf("%-10s %8zu %12.2f %12.2f %7.2f %6s  %-17s %-17s\n", r.what.c_str(),
                r.replicas, r.lockstep.median, r.baseline.median, r.ratio(),
                r.pass() ? "PASS" : "FAIL", range(r.lockstep).c_str(),
                range(r.baseline).c_str());
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double x) {
  if (!std::isfinite(x))
    return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

/// The first "model name" of /proc/cpuinfo, or "unknown".
std::string cpu_model() {
  std::ifstream in{"/proc/cpuinfo"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos)
        return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown";
}

void write_json(const std::string& path, const std::vector<row>& rows, const options& opts) {
  const auto& rt = lockstep::get_runtime_options();
  std::ostringstream out;
  out << "{\n  \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    out << (i == 0 ? "\n" : ",\n") << "    {\"what\": " << json_string(r.what)
        << ", \"replicas\": " << r.replicas
        << ", \"lockstep_us\": " << json_number(r.lockstep.median)
        << ", \"baseline_us\": " << json_number(r.baseline.median)
        << ", \"ratio\": " << json_number(r.ratio())
        << ", \"pass\": " << (r.pass() ? "true" : "false")
        << ", \"lockstep_us_min\": " << json_number(r.lockstep.min)
        << ", \"lockstep_us_max\": " << json_number(r.lockstep.max)
        << ", \"baseline_us_min\": " << json_number(r.baseline.min)
        << ", \"baseline_us_max\": " << json_number(r.baseline.max) << "}";
  }
  out << "\n  ],\n"
      << "  \"target_ratio\": " << json_number(target_ratio) << ",\n"
      << "  \"iterations\": " << opts.iters << ",\n"
      << "  \"repetitions\": " << opts.reps << ",\n"
      << "  \"merges_per_run\": " << opts.merges << ",\n"
      << "  \"merge_runs_per_repetition\": " << merge_runs(opts) << ",\n"
      << "  \"method\": {\n"
      << "    \"run\": " << json_string("microseconds per run() of an empty replica function: "
                                        "elapsed / iterations") << ",\n"
      << "    \"merge_call\": " << json_string("microseconds per merge_call with an empty merge "
                                               "function: (time per run with merges_per_run "
                                               "merge_calls - time per empty run of the same "
                                               "repetition) / merges_per_run") << ",\n"
      << "    \"statistic\": " << json_string("median over repetitions; ratio = lockstep median / "
                                              "baseline median; arms interleaved per repetition") << ",\n"
      << "    \"baseline\": " << json_string("persistent std::threads, one per replica, woken by "
                                             "condition variables; the calling thread is the "
                                             "coordinator that gathers, merges and scatters") << "\n"
      << "  },\n"
      << "  \"hardware_concurrency\": " << std::thread::hardware_concurrency() << ",\n"
      << "  \"cpus\": " << json_string(cpus_string(opts.cpus)) << ",\n"
      << "  \"cpu\": " << json_string(cpu_model()) << ",\n"
      << "  \"lockstep_version\": " << json_string(lockstep::version) << ",\n"
      << "  \"runtime_options\": {\n"
      << "    \"scheduler_threads\": " << rt.scheduler_threads << ",\n"
      << "    \"scheduler_moderate_sleep_us\": " << rt.scheduler_moderate_sleep.count() << ",\n"
      << "    \"scheduler_policy\": " << json_string(rt.scheduler_policy) << ",\n"
      << "    \"spin_wait_us\": " << rt.spin_wait.count() << ",\n"
      << "    \"timeout_ms\": " << rt.timeout.count() << ",\n"
      << "    \"log_level\": " << json_string(rt.log_level) << "\n"
      << "  }\n"
      << "}\n";
  std::ofstream file{path};
  file << out.str();
  if (!file)
    throw std::runtime_error("cannot write " + path);
}

} // namespace

int main(int argc, char** argv) try {
  const auto opts = parse_options(argc, argv);
  if (!opts.cpus.empty())
    pin_to(opts.cpus); // before any thread of either arm exists
  const auto& rt = lockstep::get_runtime_options();
  std::printf("dispatch: %zu calls per repetition (merge_call: %zu runs x %zu merge_calls), "
              "%zu repetitions per arm, interleaved\n",
              opts.iters, merge_runs(opts), opts.merges, opts.reps);
  std::printf("hardware_concurrency %u, cpus %s; runtime: scheduler threads %zu (0 = hardware), "
              "policy %s, moderate sleep %lld us, spin %lld us\n",
              std::thread::hardware_concurrency(), cpus_string(opts.cpus).c_str(), rt.scheduler_threads,
              rt.scheduler_policy.c_str(),
              static_cast<long long>(rt.scheduler_moderate_sleep.count()),
              static_cast<long long>(rt.spin_wait.count()));
  std::printf("run: us per run() of an empty function; merge_call: us per merge_call = "
              "(run with %zu merge_calls - empty run) / %zu\n\n",
              opts.merges, opts.merges);
  std::fflush(stdout);

  std::vector<row> rows;
  for (const auto n : opts.replicas) {
    lockstep::mirrored_strategy strategy{lockstep::cpu_devices(static_cast<int>(n))};
    thread_baseline baseline{n};
    // Warm up: threads started, caches and allocators primed.
    const auto warmup = std::max<std::size_t>(opts.merges, opts.iters / 10);
    measure_lockstep(strategy, opts, warmup);
    measure_baseline(baseline, opts, warmup);
    std::vector<double> ls_run, ls_merge, bl_run, bl_merge;
    for (std::size_t rep = 0; rep < opts.reps; ++rep) {
      const auto ls = measure_lockstep(strategy, opts, opts.iters);
      const auto bl = measure_baseline(baseline, opts, opts.iters);
      ls_run.push_back(ls.run_us);
      ls_merge.push_back(ls.merge_us);
      bl_run.push_back(bl.run_us);
      bl_merge.push_back(bl.merge_us);
    }
    rows.push_back({"run", n, summarize(ls_run), summarize(bl_run)});
    rows.push_back({"merge_call", n, summarize(ls_merge), summarize(bl_merge)});
  }
  print_table(rows);
  const auto passed = std::count_if(rows.begin(), rows.end(), [](const row& r) { return r.pass(); });
  std::printf("\n%zu of %zu figures within %.0fx of the baseline (medians of %zu repetitions; "
              "ranges are min-max)\n",
              static_cast<std::size_t>(passed), rows.size(), target_ratio, opts.reps);
  if (!opts.json.empty()) {
    write_json(opts.json, rows, opts);
    std::printf("wrote %s\n", opts.json.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "dispatch: %s\n", e.what());
  return 2;
}

// allreduce: what an in-process all-reduce costs, next to the machine's copy
// bandwidth measured in the same run.
//
// How it works. For each replica count N the benchmark makes a
// `slice_all_reduce` and a `reduction_to_one_device` and calls them as an
// application would:
//
//   ops.reduce(reduce_op::sum, per_replica<tensor>{components}, destinations{components})
//
// where component r is a float32 tensor on cpu_device(r). Element i of
// component r holds (i mod 251) + r, so every element of every result is
// known in closed form; the first step of each arm in each cell is checked
// against it (every element, every destination) and a wrong value throws.
//
// Table 1, one cell per (S bytes per replica, N): the two algorithms are the
// arms. Each arm is calibrated (a warm-up of about half the budget gives the
// time per step), then repetitions alternate, A B A B ..., each running as
// many steps as fill --budget-ms; the figure is the median over
// repetitions of the time per step. algbw = S / t, busbw = algbw * 2(N-1)/N
// (nccl-tests convention, GB = 1e9 B).
//
// The bound. An all-reduce reads N*S bytes and writes N*S bytes, so at a
// copy bandwidth of B bytes (read + written) per second it takes at least
// 2NS/B: algbw <= B/(2N). B is measured per N, before and after that N's
// cells: N std::threads each std::memcpy their share of a source into a
// destination, source + destination = max(--working-set, 2*N*largest S)
// bytes, so the copy runs on as many threads and from the same memory level
// as the largest all-reduces. (A thread's share, at most 64 MiB by
// default, stays below the size at which glibc's memcpy switches to
// non-temporal stores, between 128 and 256 MiB per call on this machine, so
// B is a copy with ordinary stores, as the all-reduce's 32 KiB chunk copies
// are.) The table shows B, the bound and algbw as a fraction of it.
//
// Cache. The last-level cache is --cache bytes (105 MiB here: memcpy
// bandwidth falls between working sets of 64 and 256 MiB, although lscpu in
// this VM reports 480 MiB). When a step's inputs and outputs (2*N*S, each
// tensor counted as whole 64-byte lines) would fit in it, the cell builds K
// independent sets of inputs, enough for the sets' inputs to exceed
// --working-set (256 MiB), and each step takes the next set round-robin, so
// a set's inputs are cold again when it comes back.
// K is capped so that the sets stay below --memory bytes (4 GiB) and
// --max-tensors tensors; a capped K may leave the smallest sizes with less
// than --working-set, and the table says how many sets and how many bytes.
// Outputs are not rotated and cannot be reused: the API allocates every
// result per call (slice_all_reduce zero-fills its outputs first,
// reduction_to_one_device copies into new buffers), and that allocation is
// part of the measured time, as it is for a user. With glibc's default
// malloc a buffer above 32 MiB is a fresh mmap on every call, so its page
// faults are timed too. A step's results are kept until the step ends, then
// dropped.
//
// Table 2, slice_all_reduce only: M tensors of s bytes per replica (1000 x
// 4 KiB) reduced one by one (M reduce calls per step) and through
// batch_reduce (one call with M pairs per step), next to one all-reduce of
// 4 MiB, the three arms alternating as above and rotated by the same rule.
// batch_reduce has no fusion yet: it makes one reduce per pair, so it shows
// what the batching call itself saves, not what fusion will. The ratio
// column is each arm's algbw over the single 4 MiB all-reduce's.
//
// Only the public API is used, as an application would.

#include "lockstep/lockstep.hpp"

#include "bench_support.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using lockstep::bench::parse_count;
using lockstep::bench::parse_flags;
using lockstep::bench::parse_list;
using lockstep::bench::pin_to;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * kib;
constexpr std::size_t gib = 1024 * mib;
constexpr std::size_t cache_line = 64;

/// Bytes of bookkeeping per input tensor (handle, shape, devices, allocator
/// header, control block), counted against --memory next to its data.
constexpr std::size_t tensor_overhead = 512;

// -- options ------------------------------------------------------------------

struct options {
  std::vector<std::size_t> sizes{4, 4 * kib, 64 * kib, mib, 16 * mib, 64 * mib};
  std::vector<std::size_t> replicas{2, 4, 8};
  std::size_t small_count = 1000;
  std::size_t small_bytes = 4 * kib;
  std::size_t single_bytes = 4 * mib;
  std::vector<std::size_t> small_replicas{2, 4};
  std::vector<std::size_t> tables{1, 2};
  std::size_t reps = 5;
  std::size_t budget_ms = 300;
  std::size_t cache = 105 * mib;
  std::size_t working_set = 256 * mib;
  std::size_t memory = 4 * gib;
  std::size_t max_tensors = std::size_t{1} << 18;
  std::vector<std::size_t> cpus;
  std::string json;

  double budget_s() const { return static_cast<double>(budget_ms) / 1000.0; }
};

constexpr std::string_view usage = R"(usage: allreduce [options]
  --sizes LIST           table 1: bytes per replica, multiples of 4
                         (default 4,4096,65536,1048576,16777216,67108864)
  --replicas LIST        table 1: replica counts, at least 2 (default 2,4,8)
  --small-count M        table 2: tensors per replica (default 1000)
  --small-bytes BYTES    table 2: bytes per tensor, a multiple of 4 (default 4096)
  --single-bytes BYTES   table 2: the single all-reduce (default 4194304)
  --small-replicas LIST  table 2: replica counts, at least 2 (default 2,4)
  --tables LIST          which tables to run, 1 and/or 2 (default 1,2)
  --reps N               repetitions of each arm, interleaved (default 5)
  --budget-ms MS         time per arm and repetition (default 300)
  --cache BYTES          last-level cache size (default 110100480 = 105 MiB)
  --working-set BYTES    rotate cache-resident cells until the inputs exceed
                         this; also the least copy working set (default 256 MiB)
  --memory BYTES         cap on the rotated input sets (default 4 GiB)
  --max-tensors N        cap on the rotated input tensors (default 262144)
  --cpus LIST            run on these CPUs only
  --json FILE            also write {"copy_gbs": ..., "rows": [...]} to FILE
Environment: the LOCKSTEP_* variables of lockstep::runtime_options apply.
)";

options parse_options(int argc, char** argv) {
  options opts;
  parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view value) {
    if (flag == "--sizes")
      opts.sizes = parse_list(flag, value, 4);
    else if (flag == "--replicas")
      opts.replicas = parse_list(flag, value, 2);
    else if (flag == "--small-count")
      opts.small_count = parse_count(flag, value);
    else if (flag == "--small-bytes")
      opts.small_bytes = parse_count(flag, value);
    else if (flag == "--single-bytes")
      opts.single_bytes = parse_count(flag, value);
    else if (flag == "--small-replicas")
      opts.small_replicas = parse_list(flag, value, 2);
    else if (flag == "--tables")
      opts.tables = parse_list(flag, value, 1);
    else if (flag == "--reps")
      opts.reps = parse_count(flag, value);
    else if (flag == "--budget-ms")
      opts.budget_ms = parse_count(flag, value);
    else if (flag == "--cache")
      opts.cache = parse_count(flag, value);
    else if (flag == "--working-set")
      opts.working_set = parse_count(flag, value);
    else if (flag == "--memory")
      opts.memory = parse_count(flag, value);
    else if (flag == "--max-tensors")
      opts.max_tensors = parse_count(flag, value);
    else if (flag == "--cpus")
      opts.cpus = parse_list(flag, value, 0);
    else if (flag == "--json")
      opts.json = value;
    else
      return false;
    return true;
  });
  const auto check_floats = [](std::string_view flag, std::size_t bytes) {
    if (bytes % 4 != 0)
      throw std::invalid_argument(std::string(flag) + ": " + std::to_string(bytes)
                                  + " is not a multiple of 4");
  };
  for (auto s : opts.sizes)
    check_floats("--sizes", s);
  check_floats("--small-bytes", opts.small_bytes);
  check_floats("--single-bytes", opts.single_bytes);
  for (auto t : opts.tables)
    if (t != 1 && t != 2)
      throw std::invalid_argument("--tables: expected 1 and/or 2, got " + std::to_string(t));
  return opts;
}

bool runs_table(const options& opts, std::size_t table) {
  return std::find(opts.tables.begin(), opts.tables.end(), table) != opts.tables.end();
}

std::string list_string(const std::vector<std::size_t>& xs, std::string_view empty) {
  if (xs.empty())
    return std::string(empty);
  std::string out;
  for (auto x : xs) {
    if (!out.empty())
      out += ',';
    out += std::to_string(x);
  }
  return out;
}

std::string size_string(std::size_t bytes) {
  char buf[32];
  if (bytes >= mib && bytes % mib == 0)
    std::snprintf(buf, sizeof buf, "%zu MiB", bytes / mib);
  else if (bytes >= kib && bytes % kib == 0)
    std::snprintf(buf, sizeof buf, "%zu KiB", bytes / kib);
  else if (bytes >= mib)
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / mib);
  else if (bytes >= kib)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / kib);
  else
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

// -- statistics -----------------------------------------------------------------

struct summary {
  double median = 0;
  double min = 0;
  double max = 0;
};

summary summarize(std::vector<double> xs) {
  if (xs.empty())
    throw std::logic_error("summarize: no samples");
  std::sort(xs.begin(), xs.end());
  const auto n = xs.size();
  const double median = n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
  return {median, xs.front(), xs.back()};
}

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// -- copy bandwidth -------------------------------------------------------------

/// Bytes read + written per second by `threads` std::threads, each
/// memcpy-ing its share of `source` into `destination` `passes` times.
double copy_gbs_once(std::byte* destination, const std::byte* source, std::size_t bytes,
                     std::size_t threads, std::size_t passes) {
  // Shares are whole cache lines; the last thread takes the rest.
  const auto share = bytes / threads / cache_line * cache_line;
  const auto start = clock_type::now();
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (std::size_t t = 0; t < threads; ++t)
    workers.emplace_back([=] {
      const auto offset = t * share;
      const auto length = t + 1 == threads ? bytes - offset : share;
      for (std::size_t p = 0; p < passes; ++p)
        std::memcpy(destination + offset, source + offset, length);
    });
  for (auto& w : workers)
    w.join();
  return 2.0 * static_cast<double>(bytes) * static_cast<double>(passes) / seconds_since(start)
         / 1e9;
}

/// `reps` samples of the copy bandwidth with `threads` threads over
/// `working_set` bytes (half source, half destination).
std::vector<double> measure_copy(std::size_t threads, std::size_t working_set,
                                 const options& opts) {
  const auto bytes = working_set / 2 / cache_line * cache_line;
  struct aligned_delete {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{cache_line}); }
  };
  const auto allocate = [bytes] {
    return std::unique_ptr<std::byte, aligned_delete>(
      static_cast<std::byte*>(::operator new(bytes, std::align_val_t{cache_line})));
  };
  auto source = allocate();
  auto destination = allocate();
  std::memset(source.get(), 1, bytes);
  std::memset(destination.get(), 2, bytes);
  // Warm-up: one pass, which also says how many passes fill the budget.
  const auto start = clock_type::now();
  copy_gbs_once(destination.get(), source.get(), bytes, threads, 1);
  const auto per_pass = seconds_since(start);
  const auto passes = static_cast<std::size_t>(std::max(1.0, std::round(opts.budget_s() / per_pass)));
  std::vector<double> samples;
  for (std::size_t rep = 0; rep < opts.reps; ++rep)
    samples.push_back(copy_gbs_once(destination.get(), source.get(), bytes, threads, passes));
  return samples;
}

// -- inputs ---------------------------------------------------------------------

/// Element i of component r: (i mod 251) + r, small integers, so that sums
/// are exact in float32.
float input_value(std::size_t i, std::size_t r) {
  return static_cast<float>(i % 251 + r);
}

float expected_sum(std::size_t i, std::size_t n) {
  return static_cast<float>(n * (i % 251) + n * (n - 1) / 2);
}

/// How many independent input sets a cell rotates through.
struct rotation {
  std::size_t sets = 1;
  std::size_t working_set = 0; // bytes: inputs of every set + outputs of one step
  bool rotated() const { return sets > 1; }
};

rotation plan_rotation(std::size_t n, std::size_t tensors, std::size_t bytes,
                       const options& opts) {
  const auto footprint = (std::max<std::size_t>(bytes, 1) + cache_line - 1) / cache_line
                         * cache_line;
  const auto step_inputs = n * tensors * footprint;
  if (2 * step_inputs > opts.cache)
    return {1, 2 * step_inputs};
  auto sets = (opts.working_set + step_inputs - 1) / step_inputs;
  sets = std::min(sets, std::max<std::size_t>(1, opts.memory / (n * tensors * (footprint + tensor_overhead))));
  sets = std::min(sets, std::max<std::size_t>(1, opts.max_tensors / (n * tensors)));
  return {sets, (sets + 1) * step_inputs};
}

using input_set = std::vector<lockstep::reduce_pair>;

/// `sets` copies of `tensors` per-replica values of `bytes` each on
/// cpu_device(0) .. cpu_device(n-1), with their destinations.
std::vector<input_set> make_sets(std::size_t n, std::size_t tensors, std::size_t bytes,
                                 std::size_t sets) {
  const auto elements = bytes / sizeof(float);
  std::vector<lockstep::tensor> templates;
  for (std::size_t r = 0; r < n; ++r) {
    auto t = lockstep::tensor::zeros(lockstep::dtype::f32,
                                     {static_cast<std::int64_t>(elements)},
                                     lockstep::cpu_device(static_cast<int>(r)));
    auto data = t.data<float>();
    for (std::size_t i = 0; i < elements; ++i)
      data[i] = input_value(i, r);
    templates.push_back(std::move(t));
  }
  std::vector<input_set> out(sets);
  for (auto& set : out) {
    set.reserve(tensors);
    for (std::size_t j = 0; j < tensors; ++j) {
      std::vector<lockstep::tensor> components;
      components.reserve(n);
      for (std::size_t r = 0; r < n; ++r)
        components.push_back(templates[r].to(templates[r].device()));
      lockstep::per_replica<lockstep::tensor> value{std::move(components)};
      lockstep::destinations where{value};
      set.push_back(lockstep::reduce_pair{std::move(value), std::move(where)});
    }
  }
  return out;
}

/// Throws unless every result holds the closed-form sum on its device.
void check_results(const std::vector<lockstep::mirrored<lockstep::tensor>>& results,
                   std::size_t tensors, std::size_t n, std::size_t bytes,
                   const std::string& what) {
  const auto fail = [&](const std::string& why) {
    throw std::runtime_error(what + ": wrong result: " + why);
  };
  if (results.size() != tensors)
    fail(std::to_string(results.size()) + " results for " + std::to_string(tensors) + " tensors");
  const auto elements = bytes / sizeof(float);
  for (std::size_t j = 0; j < tensors; ++j) {
    if (results[j].size() != n)
      fail("result " + std::to_string(j) + " has " + std::to_string(results[j].size())
           + " components, expected " + std::to_string(n));
    for (std::size_t r = 0; r < n; ++r) {
      const auto& t = results[j][r];
      if (t.device() != lockstep::cpu_device(static_cast<int>(r)))
        fail("component " + std::to_string(r) + " is on " + t.device().to_string());
      if (t.dtype() != lockstep::dtype::f32 || static_cast<std::size_t>(t.num_elements()) != elements)
        fail("component " + std::to_string(r) + " is " + t.to_string());
      const auto data = t.data<float>();
      for (std::size_t i = 0; i < elements; ++i)
        if (data[i] != expected_sum(i, n))
          fail("tensor " + std::to_string(j) + ", component " + std::to_string(r) + ", element "
               + std::to_string(i) + " is " + std::to_string(data[i]) + ", expected "
               + std::to_string(expected_sum(i, n)));
    }
  }
}

// -- arms and cells -----------------------------------------------------------

/// One way of reducing a step's inputs.
struct arm {
  std::string algorithm;           // the JSON "algorithm"
  lockstep::cross_device_ops* ops; // not owned
  bool batch;                      // one batch_reduce per step, else one reduce per tensor
  std::size_t steps = 0;           // per repetition, from the warm-up
  std::vector<double> step_us;     // one sample per repetition
};

/// A (sizes, replicas) combination with its rotated input sets; every arm
/// takes the next set round-robin, so each set comes back after all others.
class cell {
public:
  cell(std::size_t n, std::size_t tensors, std::size_t bytes, const options& opts)
    : n_(n), tensors_(tensors), bytes_(bytes), plan_(plan_rotation(n, tensors, bytes, opts)),
      sets_(make_sets(n, tensors, bytes, plan_.sets)) {}

  std::size_t replicas() const { return n_; }
  std::size_t tensors() const { return tensors_; }
  std::size_t bytes() const { return bytes_; }
  const rotation& plan() const { return plan_; }

  /// One step of `a` on the next set; its results live until it returns.
  std::vector<lockstep::mirrored<lockstep::tensor>> step(arm& a) {
    const auto& set = sets_[next_];
    next_ = (next_ + 1) % sets_.size();
    if (a.batch)
      return a.ops->batch_reduce(lockstep::reduce_op::sum, set);
    std::vector<lockstep::mirrored<lockstep::tensor>> results;
    results.reserve(set.size());
    for (const auto& pair : set)
      results.push_back(a.ops->reduce(lockstep::reduce_op::sum, pair.value, pair.destination));
    return results;
  }

  /// Microseconds per step over `steps` steps.
  double time_steps(arm& a, std::size_t steps) {
    const auto start = clock_type::now();
    for (std::size_t s = 0; s < steps; ++s)
      step(a);
    return seconds_since(start) * 1e6 / static_cast<double>(steps);
  }

  /// A checked step, then steps for about half the budget, which set how
  /// many steps a repetition runs.
  void warm_up(arm& a, const options& opts) {
    check_results(step(a), tensors_, n_, bytes_,
                  a.algorithm + " (" + size_string(bytes_) + " x " + std::to_string(tensors_)
                    + ", " + std::to_string(n_) + " replicas)");
    const auto start = clock_type::now();
    std::size_t steps = 0;
    do {
      step(a);
      ++steps;
    } while (seconds_since(start) < opts.budget_s() / 2);
    const auto per_step = seconds_since(start) / static_cast<double>(steps);
    a.steps = static_cast<std::size_t>(
      std::clamp(std::round(opts.budget_s() / per_step), 1.0, 1e7));
  }

  /// Warm-ups, then `reps` repetitions of the arms in turn.
  void measure(std::vector<arm>& arms, const options& opts) {
    for (auto& a : arms)
      warm_up(a, opts);
    for (std::size_t rep = 0; rep < opts.reps; ++rep)
      for (auto& a : arms)
        a.step_us.push_back(time_steps(a, a.steps));
  }

private:
  std::size_t n_, tensors_, bytes_;
  rotation plan_;
  std::vector<input_set> sets_;
  std::size_t next_ = 0;
};

// -- results --------------------------------------------------------------------

struct row {
  int table;                 // 1: sizes; 2: many small tensors
  std::string algorithm;     // JSON name
  std::string label;         // table 2's description of the arm
  std::size_t replicas;
  std::size_t tensors;       // per replica and step
  std::size_t tensor_bytes;  // bytes of one tensor
  std::size_t steps;         // per repetition
  rotation plan;
  summary time_us;           // per step
  double copy_gbs = 0;
  double ratio_to_single = 0; // table 2

  std::size_t bytes() const { return tensors * tensor_bytes; }
  double algbw_gbs() const { return static_cast<double>(bytes()) / (time_us.median * 1e3); }
  double busbw_gbs() const {
    return algbw_gbs() * 2.0 * static_cast<double>(replicas - 1) / static_cast<double>(replicas);
  }
  double bound_gbs() const { return copy_gbs / (2.0 * static_cast<double>(replicas)); }
  double fraction_of_bound() const { return algbw_gbs() / bound_gbs(); }
};

row make_row(int table, const arm& a, const cell& c, std::string label) {
  return {table, a.algorithm, std::move(label), c.replicas(), c.tensors(), c.bytes(),
          a.steps, c.plan(), summarize(a.step_us)};
}

std::string buffers_string(const rotation& plan) {
  char working_set[32];
  std::snprintf(working_set, sizeof working_set, "%.0f MiB",
                static_cast<double>(plan.working_set) / mib);
  if (plan.rotated())
    return "rotated over " + std::to_string(plan.sets) + " sets (" + working_set + ")";
  return "one set (" + std::string(working_set) + ")";
}

std::string gbs_string(double gbs) {
  char buf[32];
  if (gbs >= 100)
    std::snprintf(buf, sizeof buf, "%.0f", gbs);
  else if (gbs >= 1)
    std::snprintf(buf, sizeof buf, "%.2f", gbs);
  else
    std::snprintf(buf, sizeof buf, "%.3g", gbs);
  return buf;
}

std::string us_string(double us) {
  char buf[32];
  if (us >= 100)
    std::snprintf(buf, sizeof buf, "%.0f", us);
  else
    std::snprintf(buf, sizeof buf, "%.2f", us);
  return buf;
}

void print_table1(const std::vector<row>& rows) {
  std::printf("| S | N | algorithm | time us | algbw GB/s | busbw GB/s | B GB/s | B/(2N) GB/s "
              "| of bound | inputs |\n");
  std::printf("|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (const auto& r : rows)
    if (r.table == 1)
      std::printf("| %s | %zu | %s | %s | %s | %s | %s | %s | %.1f%% | %s |\n",
                  size_string(r.bytes()).c_str(), r.replicas, r.algorithm.c_str(),
                  us_string(r.time_us.median).c_str(), gbs_string(r.algbw_gbs()).c_str(),
                  gbs_string(r.busbw_gbs()).c_str(), gbs_string(r.copy_gbs).c_str(),
                  gbs_string(r.bound_gbs()).c_str(), 100.0 * r.fraction_of_bound(),
                  buffers_string(r.plan).c_str());
}

void print_table2(const std::vector<row>& rows) {
  std::printf("| N | slice_all_reduce | bytes per replica | time us | algbw GB/s | vs single "
              "| of bound | inputs |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---|\n");
  for (const auto& r : rows)
    if (r.table == 2)
      std::printf("| %zu | %s | %s | %s | %s | %.3f | %.1f%% | %s |\n", r.replicas,
                  r.label.c_str(), size_string(r.bytes()).c_str(),
                  us_string(r.time_us.median).c_str(), gbs_string(r.algbw_gbs()).c_str(),
                  r.ratio_to_single, 100.0 * r.fraction_of_bound(),
                  buffers_string(r.plan).c_str());
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

void write_json(const std::string& path, const std::vector<row>& rows,
                const std::map<std::size_t, summary>& copy, double copy_gbs,
                const options& opts) {
  const auto& rt = lockstep::get_runtime_options();
  nlohmann::json out;
  out["benchmark"] = "allreduce";
  out["copy_gbs"] = copy_gbs;
  out["copy_gbs_by_replicas"] = nlohmann::json::object();
  for (const auto& [n, s] : copy)
    out["copy_gbs_by_replicas"][std::to_string(n)] = {
      {"median", s.median}, {"min", s.min}, {"max", s.max}};
  out["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j{{"table", r.table == 1 ? "sizes" : "small_tensors"},
                     {"algorithm", r.algorithm},
                     {"bytes", r.bytes()},
                     {"tensor_bytes", r.tensor_bytes},
                     {"tensors", r.tensors},
                     {"replicas", r.replicas},
                     {"time_us", r.time_us.median},
                     {"time_us_min", r.time_us.min},
                     {"time_us_max", r.time_us.max},
                     {"steps_per_repetition", r.steps},
                     {"algbw_gbs", r.algbw_gbs()},
                     {"busbw_gbs", r.busbw_gbs()},
                     {"copy_gbs", r.copy_gbs},
                     {"bound_gbs", r.bound_gbs()},
                     {"fraction_of_bound", r.fraction_of_bound()},
                     {"rotated_sets", r.plan.sets},
                     {"rotated", r.plan.rotated()},
                     {"working_set_bytes", r.plan.working_set}};
    if (r.table == 2)
      j["ratio_to_single"] = r.ratio_to_single;
    out["rows"].push_back(std::move(j));
  }
  out["method"] = {
    {"time_us", "median over repetitions of the time per step; one step = one reduce call "
                "(table 1), or `tensors` reduce calls (one_by_one) or one batch_reduce call "
                "with `tensors` pairs (batch_reduce); arms alternate per repetition"},
    {"algbw_gbs", "bytes / time_us, bytes = tensors * tensor_bytes per replica, GB = 1e9 B"},
    {"busbw_gbs", "algbw_gbs * 2(replicas-1)/replicas (nccl-tests convention)"},
    {"copy_gbs", "bytes read + written per second by std::memcpy on `replicas` threads, each "
                 "copying its share; source + destination = max(working_set, 2 * replicas * "
                 "largest size) bytes; median of repetitions before and after that replica "
                 "count's cells; the top-level copy_gbs is the median over every sample"},
    {"bound_gbs", "copy_gbs / (2 * replicas): an all-reduce reads and writes replicas * bytes"},
    {"rotated_sets", "independent input sets taken round-robin (1: not rotated); cells whose "
                     "inputs and outputs fit the cache rotate until the inputs exceed "
                     "working_set, capped by memory and max_tensors"},
    {"outputs", "allocated by the API on every call (part of the time); a step's results "
                "are dropped when the step ends"}};
  out["options"] = {{"reps", opts.reps},
                    {"budget_ms", opts.budget_ms},
                    {"cache_bytes", opts.cache},
                    {"working_set_bytes", opts.working_set},
                    {"memory_bytes", opts.memory},
                    {"max_tensors", opts.max_tensors},
                    {"cpus", list_string(opts.cpus, "all")}};
  out["hardware_concurrency"] = std::thread::hardware_concurrency();
  out["cpu"] = cpu_model();
  out["lockstep_version"] = lockstep::version;
  out["runtime_options"] = {{"spin_wait_us", rt.spin_wait.count()},
                            {"timeout_ms", rt.timeout.count()},
                            {"scheduler_threads", rt.scheduler_threads},
                            {"scheduler_policy", rt.scheduler_policy}};
  std::ofstream file{path};
  file << out.dump(2) << "\n";
  if (!file)
    throw std::runtime_error("--json: cannot write " + path);
}

} // namespace

int main(int argc, char** argv) {
  try {
    const auto opts = parse_options(argc, argv);
    if (!opts.cpus.empty())
      pin_to(opts.cpus); // before any thread exists
    const auto& rt = lockstep::get_runtime_options();
    const bool table1 = runs_table(opts, 1);
    const bool table2 = runs_table(opts, 2);
    const auto in = [](const std::vector<std::size_t>& xs, std::size_t x) {
      return std::find(xs.begin(), xs.end(), x) != xs.end();
    };
    std::printf("allreduce: SUM of float32, median us per step over %zu repetitions of ~%zu ms "
                "per arm, arms interleaved; GB = 1e9 B\n",
                opts.reps, opts.budget_ms);
    std::printf("hardware_concurrency %u, cpus %s, %s; spin %lld us; cache %s, working set "
                "%s\n\n",
                std::thread::hardware_concurrency(), list_string(opts.cpus, "all").c_str(),
                cpu_model().c_str(), static_cast<long long>(rt.spin_wait.count()),
                size_string(opts.cache).c_str(), size_string(opts.working_set).c_str());
    std::fflush(stdout);

    // The copy covers the largest step of each replica count.
    const auto copy_working_set = [&](std::size_t n) {
      std::size_t largest = 0;
      if (table1 && in(opts.replicas, n))
        largest = *std::max_element(opts.sizes.begin(), opts.sizes.end());
      if (table2 && in(opts.small_replicas, n))
        largest = std::max({largest, opts.single_bytes, opts.small_count * opts.small_bytes});
      return std::max(opts.working_set, 2 * n * largest);
    };
    std::set<std::size_t> counts;
    if (table1)
      counts.insert(opts.replicas.begin(), opts.replicas.end());
    if (table2)
      counts.insert(opts.small_replicas.begin(), opts.small_replicas.end());

    std::vector<row> rows;
    std::map<std::size_t, summary> copy;
    std::vector<double> all_copy_samples;
    for (const auto n : counts) {
      const bool sizes_here = table1 && in(opts.replicas, n);
      const bool small_here = table2 && in(opts.small_replicas, n);
      const auto copy_set = copy_working_set(n);
      std::fprintf(stderr, "N = %zu: copy bandwidth over %s\n", n, size_string(copy_set).c_str());
      auto copy_samples = measure_copy(n, copy_set, opts);

      lockstep::slice_all_reduce slices;
      lockstep::reduction_to_one_device to_one;
      const auto first_row = rows.size();
      if (sizes_here)
        for (const auto s : opts.sizes) {
          std::fprintf(stderr, "N = %zu: %s\n", n, size_string(s).c_str());
          cell c{n, 1, s, opts};
          std::vector<arm> arms{{"slice_all_reduce", &slices, false},
                                {"reduction_to_one_device", &to_one, false}};
          c.measure(arms, opts);
          for (const auto& a : arms)
            rows.push_back(make_row(1, a, c, ""));
        }
      if (small_here) {
        std::fprintf(stderr, "N = %zu: %zu x %s and %s\n", n, opts.small_count,
                     size_string(opts.small_bytes).c_str(), size_string(opts.single_bytes).c_str());
        // The small tensors' cell holds both of their arms; the single
        // all-reduce has its own sets, and all three arms alternate.
        cell small{n, opts.small_count, opts.small_bytes, opts};
        cell single{n, 1, opts.single_bytes, opts};
        arm one_by_one{"slice_all_reduce one_by_one", &slices, false};
        arm batch{"slice_all_reduce batch_reduce", &slices, true};
        arm whole{"slice_all_reduce", &slices, false};
        small.warm_up(one_by_one, opts);
        small.warm_up(batch, opts);
        single.warm_up(whole, opts);
        for (std::size_t rep = 0; rep < opts.reps; ++rep) {
          one_by_one.step_us.push_back(small.time_steps(one_by_one, one_by_one.steps));
          batch.step_us.push_back(small.time_steps(batch, batch.steps));
          whole.step_us.push_back(single.time_steps(whole, whole.steps));
        }
        const auto m = std::to_string(opts.small_count);
        rows.push_back(make_row(2, one_by_one, small, "one by one (" + m + " reduce calls)"));
        rows.push_back(make_row(2, batch, small,
                                "batch_reduce (1 call, " + m + " pairs, no fusion)"));
        rows.push_back(make_row(2, whole, single,
                                "single all-reduce of " + size_string(opts.single_bytes)));
      }

      std::fprintf(stderr, "N = %zu: copy bandwidth again\n", n);
      auto after = measure_copy(n, copy_set, opts);
      copy_samples.insert(copy_samples.end(), after.begin(), after.end());
      all_copy_samples.insert(all_copy_samples.end(), copy_samples.begin(), copy_samples.end());
      copy[n] = summarize(copy_samples);
      for (auto i = first_row; i < rows.size(); ++i)
        rows[i].copy_gbs = copy[n].median;
      if (small_here) {
        const auto single_algbw = rows.back().algbw_gbs();
        for (auto i = rows.size() - 3; i < rows.size(); ++i)
          rows[i].ratio_to_single = rows[i].algbw_gbs() / single_algbw;
      }
    }

    std::printf("copy bandwidth B (std::memcpy, N threads, bytes read + written per second; "
                "median [min-max] of %zu samples):\n\n",
                2 * opts.reps);
    std::printf("| N | working set | B GB/s | range |\n|---:|---:|---:|---|\n");
    for (const auto& [n, s] : copy)
      std::printf("| %zu | %s | %s | [%s-%s] |\n", n, size_string(copy_working_set(n)).c_str(),
                  gbs_string(s.median).c_str(), gbs_string(s.min).c_str(),
                  gbs_string(s.max).c_str());
    if (table1) {
      std::printf("\nTable 1: one all-reduce of S bytes per replica; algbw = S/t, busbw = "
                  "algbw*2(N-1)/N, bound = B/(2N)\n\n");
      print_table1(rows);
    }
    if (table2) {
      std::printf("\nTable 2: %zu tensors of %s per replica vs one all-reduce of %s, "
                  "slice_all_reduce; 'vs single' = algbw / the single all-reduce's algbw\n\n",
                  opts.small_count, size_string(opts.small_bytes).c_str(),
                  size_string(opts.single_bytes).c_str());
      print_table2(rows);
    }
    const auto copy_gbs = all_copy_samples.empty() ? 0.0 : summarize(all_copy_samples).median;
    if (!opts.json.empty()) {
      write_json(opts.json, rows, copy, copy_gbs, opts);
      std::printf("\nwrote %s\n", opts.json.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce: %s\n", e.what());
    return 1;
  }
}

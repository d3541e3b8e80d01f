// allreduce: what an in-process all-reduce costs through the replicas' fast
// path, next to the machine's copy bandwidth measured in the same run.
//
// How it works. For each replica count N the benchmark makes one
// mirrored_strategy over cpu_devices(N) (choose_the_best gives it
// slice_all_reduce) and reduces float32 buffers as an application would,
// through the public API only. Element i of replica r's buffer holds
// (i mod 251) + r, so the first step's result is known in closed form: before
// an arm is timed, its input set is refilled, one step runs, and every
// element of every replica's result is checked against it (a wrong value
// throws). An in-place SUM then keeps changing the buffers (the values grow
// and may reach inf, never NaN); only that first step is checked, as the
// peers' benchmarks do (reference/peers-bench/common.h).
//
// Table 1, one cell per (S bytes per replica, N), two arms:
//
//   in place   one `strategy.run` per batch; in it each replica loops K times
//              over  buf = ctx.all_reduce(reduce_op::sum, std::move(buf))
//              with the only handle of its buffer, so the collective runs on
//              the replica threads, writes the result into the buffer
//              itself and allocates nothing (the check step verifies that
//              the buffer's address stays). Time per all-reduce = batch
//              time / K; K is calibrated so that a batch lasts about
//              --budget-ms, which amortises the run's dispatch (an empty
//              `run`, measured per N, is shown next to it as a share).
//   reduce_to  for reference: strategy.extended().reduce_to(sum, per_replica,
//              its devices) called K times from the main thread: the same
//              slice_all_reduce, its ranks on the devices' executor threads,
//              every result allocated per call (part of the time, as for a
//              user; above 32 MiB a fresh mmap whose page faults count).
//
// Each arm is calibrated (a warm-up of about half the budget), then
// repetitions alternate, A B A B ..., and the figure is the median over
// repetitions of the time per all-reduce. algbw = S / t, busbw = algbw *
// 2(N-1)/N (nccl-tests convention, GB = 1e9 B).
//
// The bound. An all-reduce reads N*S bytes and writes N*S bytes, so at a
// copy bandwidth of B bytes (read + written) per second it takes at least
// 2NS/B: algbw <= B/(2N). B is measured per N: N std::threads each
// std::memcpy their share of a source into a destination, source +
// destination = max(--working-set, 2*N*largest S) bytes, so the copy runs on
// as many threads and from the same memory level as the largest
// all-reduces. B is the median of --reps samples before that N's cells, one
// after each cell and --reps after them, so that it sees the same
// conditions as the cells. (B is what glibc's memcpy reaches at that share
// size; at large shares it may use non-temporal stores, which the
// all-reduce's chunk copies do not.)
//
// Cache. The last-level cache is --cache bytes (105 MiB here). When a step's
// N buffers (N*S, each tensor counted as whole 64-byte lines) would fit in
// it, the cell builds enough independent buffer sets per replica for the
// sets to exceed --working-set (256 MiB), and each step takes the next set
// round-robin, so a set is cold again when it comes back. The sets are
// capped by --memory bytes and --max-tensors tensors, so the smallest sizes
// stay below --working-set; the table says how many sets and bytes.
//
// Table 2: M tensors of s bytes per replica (1000 x 4 KiB), in place through
// the fast path: fused (one ctx.all_reduce(sum, std::move(vector of M)) per
// step: one pack, one rendezvous, one barrier) and one by one (M in-place
// ctx.all_reduce calls per step), next to one in-place all-reduce of 4 MiB;
// the three arms alternate and rotate by the same rule. "vs single" is each
// arm's algbw over the single all-reduce's.
//
// Table 3: waiting CPU. N replicas (8, and 2) each all-reduce one float in
// place; replica N-1 first sleeps --wait-ms (1 s) while the others wait in
// the collective. The figure is the process's CPU time (getrusage
// RUSAGE_SELF, user + sys, every thread, nothing subtracted) consumed during
// that one `strategy.run`, after a warm-up run of the same collective.
//
// Noise. The machine may be shared: for each N (and each waiting run, and
// the whole run) the output shows the share of the machine that other
// processes used meanwhile (/proc/stat busy time minus this process's
// getrusage time). Small all-reduces among sleeping and waking threads slow
// down 10-100x when other processes take the CPUs.
//
// At the end, the issue's targets with the measured value and pass/fail;
// Open MPI's figures are the peers' (reference/peers-bench/RESULTS.md,
// vader shared memory, in place, buffers left cache-resident: here they are
// rotated, which can only make lockstep look slower). They were measured on
// one host; tools/compare_mpi.sh measures Open MPI next to this benchmark on
// the machine at hand, over several rounds.

#include "lockstep/lockstep.hpp"

#include "allreduce_workers.hpp"
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
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

namespace {

using lockstep::bench::parse_count;
using lockstep::bench::parse_flags;
using lockstep::bench::parse_list;
using lockstep::bench::pin_to;
using lockstep::bench::size_string;
using lockstep::bench::summarize;
using lockstep::bench::summary;
using lockstep::tensor;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * kib;
constexpr std::size_t gib = 1024 * mib;
constexpr std::size_t cache_line = 64;

/// Bytes of bookkeeping per tensor (handle, shape, device, allocator header,
/// control block), counted against --memory next to its data.
constexpr std::size_t tensor_overhead = 512;

// -- the targets' reference figures ---------------------------------------------

/// Open MPI 4.1.4 MPI_Allreduce (MPI_IN_PLACE, SUM, float32, default vader
/// shared memory) on the peers' host: reference/peers-bench/RESULTS.md,
/// median of quiet launches, 2026-11-22 (tools/compare_mpi.sh measures the
/// machine at hand).
constexpr double open_mpi_latency_us = 0.74; // 4 B, 2 ranks

struct open_mpi_figure {
  std::size_t ranks;
  std::size_t bytes;
  double algbw_gbs;
};

constexpr open_mpi_figure open_mpi_algbw[] = {
  {2, mib, 3.69}, {2, 16 * mib, 3.30}, {2, 64 * mib, 1.56},
  {4, mib, 1.33}, {4, 16 * mib, 0.840}, {4, 64 * mib, 0.551},
};

constexpr double latency_factor = 3.0;       // within 3x Open MPI's latency
constexpr double bound_fraction = 0.70;      // at 16 and 64 MiB
constexpr double open_mpi_factor = 3.0;      // algbw at 1 MiB and above
constexpr double waiting_cpu_limit_s = 0.2;  // 8 replicas waiting 1 s
constexpr double fused_ratio_limit = 0.6;    // fused vs one 4 MiB all-reduce

// -- options ------------------------------------------------------------------

struct options {
  std::vector<std::size_t> sizes{4, 4 * kib, 64 * kib, mib, 16 * mib, 64 * mib};
  std::vector<std::size_t> replicas{2, 4, 8};
  std::size_t small_count = 1000;
  std::size_t small_bytes = 4 * kib;
  std::size_t single_bytes = 4 * mib;
  std::vector<std::size_t> small_replicas{2, 4};
  std::vector<std::size_t> wait_replicas{8, 2};
  std::size_t wait_ms = 1000;
  std::vector<std::size_t> tables{1, 2, 3};
  bool reference_arm = true;
  std::size_t reps = 5;
  std::size_t budget_ms = 300;
  std::size_t cache = 105 * mib;
  std::size_t working_set = 256 * mib;
  std::size_t memory = 4 * gib;
  std::size_t max_tensors = std::size_t{1} << 18;
  std::vector<std::size_t> cpus;
  std::vector<std::size_t> workers; // --workers: the table between processes instead
  bool launched_worker = false;      // --workers launcher: one worker of a launched job
  std::size_t replicas_per_worker = 1;
  std::string json;

  double budget_s() const { return static_cast<double>(budget_ms) / 1000.0; }
};

constexpr std::string_view usage = R"(usage: allreduce [options]
  --sizes LIST           table 1: bytes per replica, multiples of 4
                         (default 4,4096,65536,1048576,16777216,67108864)
  --replicas LIST        table 1: replica counts, at least 2 (default 2,4,8)
  --reduce-to 0|1        table 1: also time the cross-replica reduce_to arm
                         (default 1)
  --small-count M        table 2: tensors per replica (default 1000)
  --small-bytes BYTES    table 2: bytes per tensor, a multiple of 4 (default 4096)
  --single-bytes BYTES   table 2: the single all-reduce (default 4194304)
  --small-replicas LIST  table 2: replica counts, at least 2 (default 2,4)
  --wait-replicas LIST   table 3: replica counts, at least 2 (default 8,2)
  --wait-ms MS           table 3: how long the last replica sleeps (default 1000)
  --tables LIST          which tables to run, of 1, 2, 3 (default 1,2,3)
  --reps N               repetitions of each arm, interleaved (default 5)
  --budget-ms MS         time per arm and repetition (default 300)
  --cache BYTES          last-level cache size (default 110100480 = 105 MiB)
  --working-set BYTES    rotate cache-resident cells until the buffers exceed
                         this; also the least copy working set (default 256 MiB)
  --memory BYTES         cap on the rotated buffer sets (default 4 GiB)
  --max-tensors N        cap on the rotated tensors (default 262144)
  --cpus LIST            run on these CPUs only
  --workers LIST         instead of the tables: the all-reduce between this many
                         worker processes (at least 2, e.g. 2,4), over --sizes,
                         against the loopback TCP bound
  --workers launcher     instead of the tables: this process is one worker of a
                         job a launcher started, e.g. each rank of
                           mpirun -np 2 -x LOCKSTEP_COORDINATOR=127.0.0.1:PORT \
                             allreduce --workers launcher
                         (the cluster from the environment, as any lockstep
                         program reads it; LOCKSTEP_COMMUNICATOR=mpi for MPI's
                         collectives; at least 2 workers); worker 0 prints
                         the table, no bound
  --replicas-per-worker K
                         with --workers: CPU replicas in each worker (default 1)
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
    else if (flag == "--reduce-to") {
      const auto v = parse_list(flag, value, 0);
      if (v.size() != 1 || v[0] > 1)
        throw std::invalid_argument("--reduce-to: expected 0 or 1");
      opts.reference_arm = v[0] == 1;
    } else if (flag == "--small-count")
      opts.small_count = parse_count(flag, value);
    else if (flag == "--small-bytes")
      opts.small_bytes = parse_count(flag, value);
    else if (flag == "--single-bytes")
      opts.single_bytes = parse_count(flag, value);
    else if (flag == "--small-replicas")
      opts.small_replicas = parse_list(flag, value, 2);
    else if (flag == "--wait-replicas")
      opts.wait_replicas = parse_list(flag, value, 2);
    else if (flag == "--wait-ms")
      opts.wait_ms = parse_count(flag, value);
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
    else if (flag == "--workers") {
      opts.launched_worker = value == "launcher";
      opts.workers = opts.launched_worker ? std::vector<std::size_t>{}
                                          : parse_list(flag, value, 2);
    }
    else if (flag == "--replicas-per-worker")
      opts.replicas_per_worker = parse_count(flag, value);
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
    if (t < 1 || t > 3)
      throw std::invalid_argument("--tables: expected 1, 2 and/or 3, got " + std::to_string(t));
  return opts;
}

bool contains(const std::vector<std::size_t>& xs, std::size_t x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
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

// -- statistics -----------------------------------------------------------------

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// User + system CPU seconds of every thread of this process so far.
double process_cpu_seconds(double* user = nullptr, double* sys = nullptr) {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    throw std::runtime_error("getrusage failed");
  const auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  if (user != nullptr)
    *user = seconds(usage.ru_utime);
  if (sys != nullptr)
    *sys = seconds(usage.ru_stime);
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

/// Busy CPU seconds of the whole machine so far, every CPU (/proc/stat:
/// user, nice, system, irq, softirq, steal); 0 where it cannot be read.
double machine_busy_seconds() {
  std::ifstream in{"/proc/stat"};
  std::string label;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0,
                     softirq = 0, steal = 0;
  if (!(in >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal)
      || label != "cpu")
    return 0;
  const auto ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return static_cast<double>(user + nice + system + irq + softirq + steal) / ticks;
}

/// How much of the machine other processes used over a stretch of this run:
/// the machine's busy time minus this process's CPU time, over wall time x
/// hardware threads. Noise shows here before it shows in a median.
class load_meter {
public:
  load_meter()
    : start_(clock_type::now()), busy_(machine_busy_seconds()), own_(process_cpu_seconds()) {}

  /// The share of the machine used by others since construction, in [0, 1].
  double others() const {
    const auto wall = seconds_since(start_);
    const auto threads = std::max(1u, std::thread::hardware_concurrency());
    const auto foreign = (machine_busy_seconds() - busy_) - (process_cpu_seconds() - own_);
    return std::clamp(foreign / (wall * threads), 0.0, 1.0);
  }

private:
  clock_type::time_point start_;
  double busy_;
  double own_;
};

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

/// The copy bandwidth with `threads` threads over `working_set` bytes (half
/// source, half destination), one sample at a time, so that samples can be
/// spread over the cells they bound.
class copy_meter {
public:
  copy_meter(std::size_t threads, std::size_t working_set, const options& opts)
    : threads_(threads), bytes_(working_set / 2 / cache_line * cache_line),
      source_(allocate(bytes_)), destination_(allocate(bytes_)) {
    std::memset(source_.get(), 1, bytes_);
    std::memset(destination_.get(), 2, bytes_);
    // Warm-up: one pass, which also says how many passes fill the budget.
    const auto start = clock_type::now();
    copy_gbs_once(destination_.get(), source_.get(), bytes_, threads_, 1);
    const auto per_pass = seconds_since(start);
    passes_ = static_cast<std::size_t>(std::max(1.0, std::round(opts.budget_s() / per_pass)));
  }

  /// GB/s over about --budget-ms.
  double sample() {
    return copy_gbs_once(destination_.get(), source_.get(), bytes_, threads_, passes_);
  }

private:
  struct aligned_delete {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{cache_line}); }
  };
  using buffer = std::unique_ptr<std::byte, aligned_delete>;

  static buffer allocate(std::size_t bytes) {
    return buffer(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{cache_line})));
  }

  std::size_t threads_;
  std::size_t bytes_;
  buffer source_;
  buffer destination_;
  std::size_t passes_ = 1;
};

// -- dispatch -------------------------------------------------------------------

/// Median microseconds of an empty `strategy.run`, over about 50 ms.
double measure_dispatch_us(const lockstep::strategy& strategy) {
  const auto empty = [](lockstep::replica_context&) {};
  strategy.run(empty);
  std::vector<double> samples;
  const auto start = clock_type::now();
  do {
    const auto t = clock_type::now();
    strategy.run(empty);
    samples.push_back(seconds_since(t) * 1e6);
  } while (seconds_since(start) < 0.05 && samples.size() < 100000);
  return summarize(samples).median;
}

// -- buffers ----------------------------------------------------------------------

/// Element i of replica r: (i mod 251) + r, small integers, so that the first
/// sum is exact in float32.
float input_value(std::size_t i, std::size_t r) {
  return static_cast<float>(i % 251 + r);
}

float expected_sum(std::size_t i, std::size_t n) {
  return static_cast<float>(n * (i % 251) + n * (n - 1) / 2);
}

/// How many independent buffer sets a cell rotates through.
struct rotation {
  std::size_t sets = 1;
  std::size_t working_set = 0; // bytes: the buffers of every set
  bool rotated() const { return sets > 1; }
};

/// A step's N buffers (`tensors` of `bytes` per replica) stay in the cache
/// when they fit it; then enough sets to exceed --working-set, within the
/// caps.
rotation plan_rotation(std::size_t n, std::size_t tensors, std::size_t bytes,
                       const options& opts) {
  const auto footprint = (std::max<std::size_t>(bytes, 1) + cache_line - 1) / cache_line
                         * cache_line;
  const auto step_bytes = n * tensors * footprint;
  if (step_bytes > opts.cache)
    return {1, step_bytes};
  auto sets = (opts.working_set + step_bytes - 1) / step_bytes;
  sets = std::min(sets, std::max<std::size_t>(
                          1, opts.memory / (n * tensors * (footprint + tensor_overhead))));
  sets = std::min(sets, std::max<std::size_t>(1, opts.max_tensors / (n * tensors)));
  return {sets, sets * step_bytes};
}

/// Throws unless `t` is a float32 tensor of `elements` on cpu_device(r)
/// holding the closed-form sum over `n` replicas.
void check_sum(const tensor& t, std::size_t r, std::size_t n, std::size_t elements,
               const std::string& what) {
  const auto fail = [&](const std::string& why) {
    throw std::runtime_error(what + ": wrong result: " + why);
  };
  if (t.device() != lockstep::cpu_device(static_cast<int>(r)))
    fail("replica " + std::to_string(r) + "'s result is on " + t.device().to_string());
  if (t.dtype() != lockstep::dtype::f32 || static_cast<std::size_t>(t.num_elements()) != elements)
    fail("replica " + std::to_string(r) + "'s result is " + t.to_string());
  const auto data = t.data<float>();
  for (std::size_t i = 0; i < elements; ++i)
    if (data[i] != expected_sum(i, n))
      fail("replica " + std::to_string(r) + ", element " + std::to_string(i) + " is "
           + std::to_string(data[i]) + ", expected " + std::to_string(expected_sum(i, n)));
}

// -- arms and cells -----------------------------------------------------------

enum class arm_kind {
  in_place,     // t = ctx.all_reduce(sum, std::move(t)), one tensor per step
  fused,        // v = ctx.all_reduce(sum, std::move(v)), v holds the step's tensors
  one_by_one,   // t = ctx.all_reduce(sum, std::move(t)) for each of the step's tensors
  cross_replica // strategy.extended().reduce_to from the main thread
};

/// One way of reducing a step's buffers.
struct arm {
  arm_kind kind;
  std::string name;            // the JSON "arm"
  std::size_t steps = 0;       // per batch (one run) or per repetition (reduce_to)
  std::vector<double> step_us; // one sample per repetition
  bool in_place = false;       // the check step left every buffer where it was
};

bool on_replicas(const arm& a) {
  return a.kind != arm_kind::cross_replica;
}

/// A (tensors x bytes, replicas) combination with its rotated buffer sets on
/// one strategy; every arm takes the next set round-robin.
class cell {
public:
  cell(lockstep::strategy strategy, std::size_t tensors, std::size_t bytes, const options& opts)
    : strategy_(std::move(strategy)), n_(strategy_.num_replicas_in_sync()), tensors_(tensors),
      bytes_(bytes), plan_(plan_rotation(n_, tensors, bytes, opts)) {
    const auto elements = bytes / sizeof(float);
    buffers_.resize(n_);
    for (std::size_t r = 0; r < n_; ++r) {
      std::vector<float> values(elements);
      for (std::size_t i = 0; i < elements; ++i)
        values[i] = input_value(i, r);
      const auto device = lockstep::cpu_device(static_cast<int>(r));
      auto& sets = buffers_[r];
      sets.resize(plan_.sets);
      for (auto& set : sets) {
        set.reserve(tensors);
        for (std::size_t j = 0; j < tensors; ++j) {
          auto t = tensor::uninitialized(lockstep::dtype::f32,
                                         {static_cast<std::int64_t>(elements)}, device);
          if (elements > 0)
            std::memcpy(t.raw_data(), values.data(), bytes);
          set.push_back(std::move(t));
        }
      }
    }
    where_.emplace(components(0)); // every replica's device, in order
  }

  std::size_t replicas() const { return n_; }
  std::size_t tensors() const { return tensors_; }
  std::size_t bytes() const { return bytes_; }
  const rotation& plan() const { return plan_; }

  /// Seconds for `steps` steps of `a` from the next set on.
  double run_batch(const arm& a, std::size_t steps) {
    const auto first = next_;
    next_ = (next_ + steps) % plan_.sets;
    const auto start = clock_type::now();
    if (on_replicas(a)) {
      strategy_.run([this, kind = a.kind, first, steps](lockstep::replica_context& ctx) {
        auto& mine = buffers_[ctx.replica_id_in_sync_group()];
        auto k = first;
        for (std::size_t s = 0; s < steps; ++s) {
          auto& set = mine[k];
          switch (kind) {
          case arm_kind::in_place:
            set[0] = ctx.all_reduce(lockstep::reduce_op::sum, std::move(set[0]));
            break;
          case arm_kind::fused:
            set = ctx.all_reduce(lockstep::reduce_op::sum, std::move(set));
            break;
          case arm_kind::one_by_one:
            for (auto& t : set)
              t = ctx.all_reduce(lockstep::reduce_op::sum, std::move(t));
            break;
          case arm_kind::cross_replica:
            break;
          }
          if (++k == plan_.sets)
            k = 0;
        }
      });
    } else {
      auto k = first;
      for (std::size_t s = 0; s < steps; ++s) {
        reduce_to(k);
        if (++k == plan_.sets)
          k = 0;
      }
    }
    return seconds_since(start);
  }

  /// Refills the next set, runs one step of `a` on it and checks every
  /// element of every replica's result; notes whether it stayed in place.
  void check(arm& a) {
    const auto k = next_;
    refill(k);
    const auto what = a.name + " (" + std::to_string(tensors_) + " x " + size_string(bytes_)
                      + ", " + std::to_string(n_) + " replicas)";
    const auto elements = bytes_ / sizeof(float);
    if (!on_replicas(a)) {
      next_ = (next_ + 1) % plan_.sets;
      const auto result = reduce_to(k);
      if (result.size() != n_)
        throw std::runtime_error(what + ": " + std::to_string(result.size())
                                 + " result components for " + std::to_string(n_) + " replicas");
      for (std::size_t r = 0; r < n_; ++r)
        check_sum(result[r], r, n_, elements, what);
      return;
    }
    std::vector<const void*> before;
    for (std::size_t r = 0; r < n_; ++r)
      for (const auto& t : buffers_[r][k])
        before.push_back(t.raw_data());
    run_batch(a, 1);
    a.in_place = true;
    std::size_t b = 0;
    for (std::size_t r = 0; r < n_; ++r) {
      const auto& set = buffers_[r][k];
      if (set.size() != tensors_)
        throw std::runtime_error(what + ": replica " + std::to_string(r) + " got "
                                 + std::to_string(set.size()) + " results");
      for (const auto& t : set) {
        check_sum(t, r, n_, elements, what);
        a.in_place = a.in_place && t.raw_data() == before[b++];
      }
    }
    if (!a.in_place)
      std::fprintf(stderr, "warning: %s did not reduce in place\n", what.c_str());
  }

  /// The check step, then batches of growing size for about half the
  /// budget, which set the steps per batch.
  void warm_up(arm& a, const options& opts) {
    check(a);
    std::size_t steps = 1;
    double seconds = run_batch(a, steps);
    while (seconds < opts.budget_s() / 4 && steps < (std::size_t{1} << 26)) {
      steps *= 2;
      seconds = run_batch(a, steps);
    }
    const auto per_step = seconds / static_cast<double>(steps);
    a.steps = static_cast<std::size_t>(std::clamp(std::round(opts.budget_s() / per_step), 1.0, 1e8));
  }

  /// Microseconds per step of one timed batch.
  double time_batch(const arm& a) {
    return run_batch(a, a.steps) * 1e6 / static_cast<double>(a.steps);
  }

private:
  /// Replica r's first tensor of set k, for each r.
  lockstep::per_replica<tensor> components(std::size_t k) const {
    std::vector<tensor> parts;
    parts.reserve(n_);
    for (std::size_t r = 0; r < n_; ++r)
      parts.push_back(buffers_[r][k][0]);
    return lockstep::per_replica<tensor>{std::move(parts)};
  }

  lockstep::mirrored<tensor> reduce_to(std::size_t k) const {
    return strategy_.extended().reduce_to(lockstep::reduce_op::sum, components(k), *where_);
  }

  void refill(std::size_t k) {
    const auto elements = bytes_ / sizeof(float);
    for (std::size_t r = 0; r < n_; ++r)
      for (auto& t : buffers_[r][k]) {
        auto data = t.data<float>();
        for (std::size_t i = 0; i < elements; ++i)
          data[i] = input_value(i, r);
      }
  }

  lockstep::strategy strategy_;
  std::size_t n_, tensors_, bytes_;
  rotation plan_;
  /// [replica][set][tensor]: each replica's sets in allocations of its own.
  std::vector<std::vector<std::vector<tensor>>> buffers_;
  std::optional<lockstep::destinations> where_;
  std::size_t next_ = 0;
};

// -- waiting CPU ----------------------------------------------------------------

struct waiting_result {
  std::size_t replicas;
  std::size_t sleeper;
  double sleep_s;
  double wall_s;
  double user_s;
  double sys_s;
  double others; // share of the machine other processes used meanwhile
  double cpu_s() const { return user_s + sys_s; }
};

/// One run in which every replica all-reduces one float in place and the
/// last replica first sleeps `opts.wait_ms`; the process CPU time it cost.
waiting_result measure_waiting(std::size_t n, const options& opts) {
  lockstep::mirrored_strategy strategy{lockstep::cpu_devices(static_cast<int>(n))};
  std::vector<tensor> buffers;
  for (std::size_t r = 0; r < n; ++r)
    buffers.push_back(tensor::filled(lockstep::dtype::f32, {1}, static_cast<double>(r + 1),
                                     lockstep::cpu_device(static_cast<int>(r))));
  const auto sleeper = n - 1;
  const auto sleep = std::chrono::milliseconds{opts.wait_ms};
  bool sleeping = false;
  const auto body = [&](lockstep::replica_context& ctx) {
    const auto r = ctx.replica_id_in_sync_group();
    if (sleeping && r == sleeper)
      std::this_thread::sleep_for(sleep);
    buffers[r] = ctx.all_reduce(lockstep::reduce_op::sum, std::move(buffers[r]));
  };
  strategy.run(body); // warm-up: every replica arrives at once
  sleeping = true;
  double user0 = 0, sys0 = 0, user1 = 0, sys1 = 0;
  const load_meter load;
  process_cpu_seconds(&user0, &sys0);
  const auto start = clock_type::now();
  strategy.run(body);
  const auto wall = seconds_since(start);
  process_cpu_seconds(&user1, &sys1);
  const auto others = load.others();
  // r + 1 summed twice: n * n(n+1)/2 everywhere.
  const auto expected = static_cast<float>(n * n * (n + 1) / 2);
  for (std::size_t r = 0; r < n; ++r)
    if (buffers[r].at<float>(0) != expected)
      throw std::runtime_error("waiting (" + std::to_string(n) + " replicas): replica "
                               + std::to_string(r) + " holds " + buffers[r].to_string()
                               + ", expected " + std::to_string(expected));
  return {n, sleeper, std::chrono::duration<double>(sleep).count(), wall, user1 - user0,
          sys1 - sys0, others};
}

// -- results --------------------------------------------------------------------

struct row {
  int table;                  // 1: sizes; 2: many small tensors
  std::string arm;            // JSON name
  std::string label;          // the table's description of the arm
  std::string algorithm;      // the strategy's cross_device_ops
  std::size_t replicas;
  std::size_t tensors;        // per replica and step
  std::size_t tensor_bytes;   // bytes of one tensor
  std::size_t steps;          // per batch (one run) or repetition (reduce_to)
  bool on_replicas;
  bool in_place;
  rotation plan;
  summary time_us;            // per step
  double dispatch_us = 0;     // an empty run on this strategy
  double copy_gbs = 0;
  double ratio_to_single = 0; // table 2

  std::size_t bytes() const { return tensors * tensor_bytes; }
  double algbw_gbs() const { return static_cast<double>(bytes()) / (time_us.median * 1e3); }
  double busbw_gbs() const {
    return algbw_gbs() * 2.0 * static_cast<double>(replicas - 1) / static_cast<double>(replicas);
  }
  double bound_gbs() const { return copy_gbs / (2.0 * static_cast<double>(replicas)); }
  double fraction_of_bound() const { return algbw_gbs() / bound_gbs(); }
  /// The run's dispatch as a share of a batch (replica arms only).
  double dispatch_share() const {
    return on_replicas ? dispatch_us / (static_cast<double>(steps) * time_us.median) : 0.0;
  }
};

row make_row(int table, const arm& a, const cell& c, std::string label, std::string algorithm,
             double dispatch_us) {
  return {table, a.name, std::move(label), std::move(algorithm), c.replicas(), c.tensors(),
          c.bytes(), a.steps, on_replicas(a), a.in_place, c.plan(), summarize(a.step_us),
          dispatch_us};
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

std::string steps_string(const row& r) {
  char buf[64];
  if (r.on_replicas)
    std::snprintf(buf, sizeof buf, "%zu/run (%.2g%%)", r.steps, 100.0 * r.dispatch_share());
  else
    std::snprintf(buf, sizeof buf, "%zu/rep", r.steps);
  return buf;
}

void print_table1(const std::vector<row>& rows) {
  std::printf("| S | N | arm | time us | algbw GB/s | busbw GB/s | B GB/s | B/(2N) GB/s "
              "| of bound | steps (run share) | buffers |\n");
  std::printf("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const auto& r : rows)
    if (r.table == 1)
      std::printf("| %s | %zu | %s | %s | %s | %s | %s | %s | %.1f%% | %s | %s |\n",
                  size_string(r.bytes()).c_str(), r.replicas, r.label.c_str(),
                  us_string(r.time_us.median).c_str(), gbs_string(r.algbw_gbs()).c_str(),
                  gbs_string(r.busbw_gbs()).c_str(), gbs_string(r.copy_gbs).c_str(),
                  gbs_string(r.bound_gbs()).c_str(), 100.0 * r.fraction_of_bound(),
                  steps_string(r).c_str(), buffers_string(r.plan).c_str());
}

void print_table2(const std::vector<row>& rows) {
  std::printf("| N | arm | bytes per replica | time us | algbw GB/s | vs single | of bound "
              "| steps (run share) | buffers |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (const auto& r : rows)
    if (r.table == 2)
      std::printf("| %zu | %s | %s | %s | %s | %.3f | %.1f%% | %s | %s |\n", r.replicas,
                  r.label.c_str(), size_string(r.bytes()).c_str(),
                  us_string(r.time_us.median).c_str(), gbs_string(r.algbw_gbs()).c_str(),
                  r.ratio_to_single, 100.0 * r.fraction_of_bound(), steps_string(r).c_str(),
                  buffers_string(r.plan).c_str());
}

void print_table3(const std::vector<waiting_result>& results) {
  std::printf("| N | sleeping replica | sleep s | run wall s | CPU user s | CPU sys s "
              "| CPU total s | other load |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& w : results)
    std::printf("| %zu | %zu | %.3f | %.3f | %.4f | %.4f | %.4f | %.0f%% |\n", w.replicas,
                w.sleeper, w.sleep_s, w.wall_s, w.user_s, w.sys_s, w.cpu_s(), 100 * w.others);
}

// -- targets --------------------------------------------------------------------

struct target {
  std::string what;
  double measured;
  double limit;
  bool at_least; // pass when measured >= limit, else when measured <= limit
  std::string unit;
  bool pass() const { return at_least ? measured >= limit : measured <= limit; }
};

const row* find_row(const std::vector<row>& rows, int table, std::string_view arm,
                    std::size_t replicas, std::size_t bytes) {
  for (const auto& r : rows)
    if (r.table == table && r.arm == arm && r.replicas == replicas && r.bytes() == bytes)
      return &r;
  return nullptr;
}

std::vector<target> evaluate_targets(const std::vector<row>& rows,
                                     const std::vector<waiting_result>& waiting,
                                     const options& opts) {
  std::vector<target> out;
  char what[160];
  if (const auto* r = find_row(rows, 1, "in_place", 2, 4)) {
    std::snprintf(what, sizeof what, "latency: 4 B, 2 replicas, within %.0fx Open MPI's %.2f us",
                  latency_factor, open_mpi_latency_us);
    out.push_back({what, r->time_us.median, latency_factor * open_mpi_latency_us, false, "us"});
  }
  for (const auto bytes : {16 * mib, 64 * mib})
    for (const auto n : opts.replicas)
      if (const auto* r = find_row(rows, 1, "in_place", n, bytes)) {
        std::snprintf(what, sizeof what, "%s, %zu replicas: algbw >= %.0f%% of B/(2N)",
                      size_string(bytes).c_str(), n, 100 * bound_fraction);
        out.push_back({what, 100.0 * r->fraction_of_bound(), 100.0 * bound_fraction, true, "%"});
      }
  for (const auto& mpi : open_mpi_algbw)
    if (const auto* r = find_row(rows, 1, "in_place", mpi.ranks, mpi.bytes)) {
      std::snprintf(what, sizeof what,
                    "%s, %zu replicas: algbw >= %.0fx Open MPI's %.3g GB/s",
                    size_string(mpi.bytes).c_str(), mpi.ranks, open_mpi_factor, mpi.algbw_gbs);
      out.push_back({what, r->algbw_gbs(), open_mpi_factor * mpi.algbw_gbs, true, "GB/s"});
    }
  for (const auto& w : waiting) {
    std::snprintf(what, sizeof what, "waiting: %zu replicas, one sleeps %.1f s: CPU%s",
                  w.replicas, w.sleep_s, w.replicas == 8 ? "" : " (extra: the 8-replica limit)");
    out.push_back({what, w.cpu_s(), waiting_cpu_limit_s, false, "s"});
  }
  for (const auto n : opts.small_replicas)
    if (const auto* r = find_row(rows, 2, "fused", n, opts.small_count * opts.small_bytes)) {
      std::snprintf(what, sizeof what, "fused %zu x %s, %zu replicas: algbw vs one %s",
                    opts.small_count, size_string(opts.small_bytes).c_str(), n,
                    size_string(opts.single_bytes).c_str());
      out.push_back({what, r->ratio_to_single, fused_ratio_limit, true, "x"});
    }
  return out;
}

void print_targets(const std::vector<target>& targets) {
  std::printf("| target | measured | limit | |\n|---|---:|---:|---|\n");
  for (const auto& t : targets)
    std::printf("| %s | %.3g %s | %s %.3g %s | %s |\n", t.what.c_str(), t.measured,
                t.unit.c_str(), t.at_least ? ">=" : "<=", t.limit, t.unit.c_str(),
                t.pass() ? "pass" : "FAIL");
}

// -- output ---------------------------------------------------------------------

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
                const std::vector<waiting_result>& waiting, const std::vector<target>& targets,
                const std::map<std::size_t, summary>& copy,
                const std::map<std::size_t, double>& dispatch,
                const std::map<std::size_t, double>& others, double others_total,
                const options& opts) {
  const auto& rt = lockstep::get_runtime_options();
  nlohmann::json out;
  out["benchmark"] = "allreduce";
  // The figure of the smallest replica count measured: 2 threads by default.
  out["copy_gbs"] = copy.empty() ? 0.0 : copy.begin()->second.median;
  out["copy_gbs_replicas"] = copy.empty() ? 0 : copy.begin()->first;
  out["copy_gbs_by_replicas"] = nlohmann::json::object();
  for (const auto& [n, s] : copy)
    out["copy_gbs_by_replicas"][std::to_string(n)] = {
      {"median", s.median}, {"min", s.min}, {"max", s.max}};
  out["dispatch_us_by_replicas"] = nlohmann::json::object();
  for (const auto& [n, us] : dispatch)
    out["dispatch_us_by_replicas"][std::to_string(n)] = us;
  out["other_load_by_replicas"] = nlohmann::json::object();
  for (const auto& [n, share] : others)
    out["other_load_by_replicas"][std::to_string(n)] = share;
  out["other_load"] = others_total;
  out["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j{{"table", r.table == 1 ? "sizes" : "small_tensors"},
                     {"arm", r.arm},
                     {"algorithm", r.algorithm},
                     {"bytes", r.bytes()},
                     {"tensor_bytes", r.tensor_bytes},
                     {"tensors", r.tensors},
                     {"replicas", r.replicas},
                     {"time_us", r.time_us.median},
                     {"time_us_min", r.time_us.min},
                     {"time_us_max", r.time_us.max},
                     {"steps_per_batch", r.steps},
                     {"on_replica_threads", r.on_replicas},
                     {"algbw_gbs", r.algbw_gbs()},
                     {"busbw_gbs", r.busbw_gbs()},
                     {"copy_gbs", r.copy_gbs},
                     {"bound_gbs", r.bound_gbs()},
                     {"fraction_of_bound", r.fraction_of_bound()},
                     {"buffer_sets", r.plan.sets},
                     {"rotated", r.plan.rotated()},
                     {"working_set_bytes", r.plan.working_set}};
    if (r.on_replicas) {
      j["in_place"] = r.in_place;
      j["dispatch_us"] = r.dispatch_us;
      j["dispatch_share"] = r.dispatch_share();
    }
    if (r.table == 2)
      j["ratio_to_single"] = r.ratio_to_single;
    out["rows"].push_back(std::move(j));
  }
  out["waiting_cpu"] = nlohmann::json::array();
  for (const auto& w : waiting)
    out["waiting_cpu"].push_back({{"replicas", w.replicas},
                                  {"sleeping_replica", w.sleeper},
                                  {"sleep_s", w.sleep_s},
                                  {"wall_s", w.wall_s},
                                  {"cpu_user_s", w.user_s},
                                  {"cpu_sys_s", w.sys_s},
                                  {"cpu_s", w.cpu_s()},
                                  {"other_load", w.others}});
  out["targets"] = nlohmann::json::array();
  for (const auto& t : targets)
    out["targets"].push_back({{"target", t.what},
                              {"measured", t.measured},
                              {"limit", t.limit},
                              {"at_least", t.at_least},
                              {"unit", t.unit},
                              {"pass", t.pass()}});
  out["method"] = {
    {"time_us", "median over repetitions of the time per step. arm in_place: one "
                "strategy.run per batch of steps_per_batch steps, in each replica "
                "t = ctx.all_reduce(sum, std::move(t)); time = batch / steps. fused: one "
                "ctx.all_reduce(sum, std::move(vector of `tensors`)) per step; one_by_one: "
                "`tensors` in-place ctx.all_reduce calls per step. reduce_to: "
                "strategy.extended().reduce_to(sum, per_replica, its devices) from the main "
                "thread, results allocated per call. Arms alternate per repetition"},
    {"algbw_gbs", "bytes / time_us, bytes = tensors * tensor_bytes per replica, GB = 1e9 B"},
    {"busbw_gbs", "algbw_gbs * 2(replicas-1)/replicas (nccl-tests convention)"},
    {"copy_gbs", "top level: the copy bandwidth of the smallest replica count measured "
                 "(copy_gbs_replicas, 2 threads by default); per row and in "
                 "copy_gbs_by_replicas: bytes read + written per second by std::memcpy on "
                 "`replicas` threads, each copying its share, source + destination = "
                 "max(working_set, 2 * replicas * largest size) bytes, median of the "
                 "samples before, between and after that replica count's cells (one after each "
                 "cell)"},
    {"bound_gbs", "copy_gbs / (2 * replicas): an all-reduce reads and writes replicas * bytes"},
    {"buffer_sets", "independent buffer sets per replica taken round-robin (1: not rotated); "
                    "cells whose replicas' buffers fit the cache rotate until they exceed "
                    "working_set, capped by memory and max_tensors"},
    {"dispatch_us", "median time of an empty strategy.run on that strategy; dispatch_share = "
                    "dispatch_us / (steps_per_batch * time_us)"},
    {"check", "the first step of each arm in each cell runs on freshly filled buffers "
              "((i mod 251) + replica) and every element of every result is compared with "
              "the closed-form sum; in_place says the buffers kept their addresses"},
    {"other_load", "share of the machine (wall time x hardware threads) that other "
                   "processes used: /proc/stat busy time minus this process's getrusage "
                   "time; per replica count from its first copy measurement to its last, "
                   "and over the whole run"},
    {"waiting_cpu", "getrusage(RUSAGE_SELF) user + sys over one strategy.run in which the "
                    "last replica sleeps sleep_s before an in-place all_reduce of one float "
                    "and the others wait in it; after a warm-up run; nothing subtracted"}};
  out["options"] = {{"reps", opts.reps},
                    {"budget_ms", opts.budget_ms},
                    {"cache_bytes", opts.cache},
                    {"working_set_bytes", opts.working_set},
                    {"memory_bytes", opts.memory},
                    {"max_tensors", opts.max_tensors},
                    {"wait_ms", opts.wait_ms},
                    {"cpus", list_string(opts.cpus, "all")}};
  out["hardware_concurrency"] = std::thread::hardware_concurrency();
  out["cpu"] = cpu_model();
  out["lockstep_version"] = lockstep::version;
  out["runtime_options"] = {{"spin_wait_us", rt.spin_wait.count()},
                            {"timeout_ms", rt.timeout.count()},
                            {"scheduler_threads", rt.scheduler_threads},
                            {"scheduler_policy", rt.scheduler_policy}};
  lockstep::bench::write_json_file(path, out.dump(2));
}

} // namespace

int main(int argc, char** argv) {
  try {
    const auto opts = parse_options(argc, argv);
    if (!opts.cpus.empty())
      pin_to(opts.cpus); // before any thread exists
    if (!opts.workers.empty() || opts.launched_worker) { // forks: before any thread exists too
      const lockstep::bench::worker_table_options table{
        opts.workers, opts.launched_worker, opts.sizes, opts.replicas_per_worker,
        opts.reps,    opts.budget_ms,       opts.json};
      return opts.launched_worker ? lockstep::bench::run_as_launched_worker(table)
                                  : lockstep::bench::run_between_workers(table);
    }
    const auto run_start = clock_type::now();
    const load_meter run_load;
    const auto& rt = lockstep::get_runtime_options();
    const bool table1 = contains(opts.tables, 1);
    const bool table2 = contains(opts.tables, 2);
    const bool table3 = contains(opts.tables, 3);
    std::printf("allreduce: SUM of float32 through mirrored_strategy(cpu_devices(N)), median us "
                "per all-reduce over %zu repetitions of ~%zu ms per arm, arms interleaved; "
                "GB = 1e9 B\n",
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
      if (table1 && contains(opts.replicas, n))
        largest = *std::max_element(opts.sizes.begin(), opts.sizes.end());
      if (table2 && contains(opts.small_replicas, n))
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
    std::map<std::size_t, double> dispatch;
    std::map<std::size_t, double> others;
    std::map<std::size_t, std::size_t> copy_count;
    std::set<std::string> algorithms;
    for (const auto n : counts) {
      const bool sizes_here = table1 && contains(opts.replicas, n);
      const bool small_here = table2 && contains(opts.small_replicas, n);
      const auto copy_set = copy_working_set(n);
      std::fprintf(stderr, "N = %zu: copy bandwidth over %s\n", n, size_string(copy_set).c_str());
      const load_meter load;
      copy_meter copier{n, copy_set, opts};
      std::vector<double> copy_samples;
      for (std::size_t rep = 0; rep < opts.reps; ++rep)
        copy_samples.push_back(copier.sample());

      lockstep::mirrored_strategy strategy{lockstep::cpu_devices(static_cast<int>(n))};
      const auto algorithm = strategy.extended().cross_device_ops().name();
      algorithms.insert(algorithm);
      dispatch[n] = measure_dispatch_us(strategy);
      const auto first_row = rows.size();
      if (sizes_here)
        for (const auto s : opts.sizes) {
          std::fprintf(stderr, "N = %zu: %s\n", n, size_string(s).c_str());
          cell c{strategy, 1, s, opts};
          std::vector<arm> arms{{arm_kind::in_place, "in_place"}};
          if (opts.reference_arm)
            arms.push_back({arm_kind::cross_replica, "reduce_to"});
          for (auto& a : arms)
            c.warm_up(a, opts);
          for (std::size_t rep = 0; rep < opts.reps; ++rep)
            for (auto& a : arms)
              a.step_us.push_back(c.time_batch(a));
          for (const auto& a : arms)
            rows.push_back(make_row(1, a, c,
                                    on_replicas(a) ? "in place (ctx.all_reduce)"
                                                   : "reduce_to (main thread)",
                                    algorithm, dispatch[n]));
          copy_samples.push_back(copier.sample());
        }
      if (small_here) {
        std::fprintf(stderr, "N = %zu: %zu x %s and %s\n", n, opts.small_count,
                     size_string(opts.small_bytes).c_str(), size_string(opts.single_bytes).c_str());
        // The small tensors' cell holds both of their arms; the single
        // all-reduce has its own sets, and all three arms alternate.
        cell small{strategy, opts.small_count, opts.small_bytes, opts};
        cell single{strategy, 1, opts.single_bytes, opts};
        arm fused{arm_kind::fused, "fused"};
        arm one_by_one{arm_kind::one_by_one, "one_by_one"};
        arm whole{arm_kind::in_place, "single"};
        small.warm_up(fused, opts);
        small.warm_up(one_by_one, opts);
        single.warm_up(whole, opts);
        for (std::size_t rep = 0; rep < opts.reps; ++rep) {
          fused.step_us.push_back(small.time_batch(fused));
          one_by_one.step_us.push_back(small.time_batch(one_by_one));
          whole.step_us.push_back(single.time_batch(whole));
        }
        const auto m = std::to_string(opts.small_count);
        rows.push_back(make_row(2, fused, small, "fused (1 all_reduce of " + m + " tensors)",
                                algorithm, dispatch[n]));
        rows.push_back(make_row(2, one_by_one, small, "one by one (" + m + " all_reduce calls)",
                                algorithm, dispatch[n]));
        rows.push_back(make_row(2, whole, single,
                                "single all_reduce of " + size_string(opts.single_bytes),
                                algorithm, dispatch[n]));
        copy_samples.push_back(copier.sample());
      }

      std::fprintf(stderr, "N = %zu: copy bandwidth again\n", n);
      for (std::size_t rep = 0; rep < opts.reps; ++rep)
        copy_samples.push_back(copier.sample());
      copy[n] = summarize(copy_samples);
      copy_count[n] = copy_samples.size();
      others[n] = load.others();
      for (auto i = first_row; i < rows.size(); ++i)
        rows[i].copy_gbs = copy[n].median;
      if (small_here) {
        const auto single_algbw = rows.back().algbw_gbs();
        for (auto i = rows.size() - 3; i < rows.size(); ++i)
          rows[i].ratio_to_single = rows[i].algbw_gbs() / single_algbw;
      }
    }

    std::vector<waiting_result> waiting;
    if (table3)
      for (const auto n : opts.wait_replicas) {
        std::fprintf(stderr, "N = %zu: waiting CPU\n", n);
        waiting.push_back(measure_waiting(n, opts));
      }

    std::string algorithm_list;
    for (const auto& a : algorithms)
      algorithm_list += (algorithm_list.empty() ? "" : ", ") + a;
    if (!counts.empty()) {
      std::printf("strategy's cross_device_ops: %s. Copy bandwidth B (std::memcpy, N threads, "
                  "bytes read + written per second; median [min-max] of %zu samples before, "
                  "one after each cell, %zu after) and an empty strategy.run:\n\n",
                  algorithm_list.c_str(), opts.reps, opts.reps);
      std::printf("| N | working set | B GB/s | range | samples | empty run us | other load |\n"
                  "|---:|---:|---:|---|---:|---:|---:|\n");
      for (const auto& [n, s] : copy)
        std::printf("| %zu | %s | %s | [%s-%s] | %zu | %s | %.0f%% |\n", n,
                    size_string(copy_working_set(n)).c_str(), gbs_string(s.median).c_str(),
                    gbs_string(s.min).c_str(), gbs_string(s.max).c_str(), copy_count[n],
                    us_string(dispatch[n]).c_str(), 100 * others[n]);
      std::printf("\n(other load: the share of the machine other processes used while that "
                  "N was measured; above a few %% the figures are noisy)\n");
    }
    if (table1) {
      std::printf("\nTable 1: one all-reduce of S bytes per replica; algbw = S/t, busbw = "
                  "algbw*2(N-1)/N, bound = B/(2N); in place: steps per strategy.run and the "
                  "empty run's share of a batch; reduce_to: calls per repetition\n\n");
      print_table1(rows);
    }
    if (table2) {
      std::printf("\nTable 2: %zu tensors of %s per replica vs one all-reduce of %s, in place "
                  "on the replica threads; 'vs single' = algbw / the single all-reduce's\n\n",
                  opts.small_count, size_string(opts.small_bytes).c_str(),
                  size_string(opts.single_bytes).c_str());
      print_table2(rows);
    }
    if (table3) {
      std::printf("\nTable 3: CPU time of the process during one strategy.run in which the "
                  "last replica sleeps before an all_reduce the others wait in "
                  "(getrusage RUSAGE_SELF, every thread)\n\n");
      print_table3(waiting);
    }
    const auto targets = evaluate_targets(rows, waiting, opts);
    if (!targets.empty()) {
      std::printf("\nTargets (Open MPI figures: reference/peers-bench/RESULTS.md, from the "
                  "peers' host; tools/compare_mpi.sh measures Open MPI here):\n\n");
      print_targets(targets);
    }
    if (!opts.json.empty()) {
      write_json(opts.json, rows, waiting, targets, copy, dispatch, others, run_load.others(),
                 opts);
      std::printf("\nwrote %s\n", opts.json.c_str());
    }
    std::printf("\ntotal %.0f s; other processes used %.0f%% of the machine meanwhile\n",
                seconds_since(run_start), 100 * run_load.others());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce: %s\n", e.what());
    return 1;
  }
}

// gpu_allreduce: what an all-reduce of K logical GPUs on one physical GPU
// costs, next to the device's copy bandwidth measured in the same run.
//
// How it works. Physical GPU 0 is split into 8 logical GPUs (gpu_devices(8),
// before any GPU tensor); other physical GPUs stay one logical GPU each.
// For each size S (float32, 4 B and powers of 4 up to --max-bytes) the
// benchmark fills 8 input buffers (replica k holds k + 1 everywhere) and 8
// output buffers, one per logical GPU of GPU 0, and times these arms:
//
//   copy             cudaMemcpyAsync device to device of S bytes on logical
//                    GPU 0's stream: B = 2·S / t (bytes read + written).
//   reduce_buffers   the on-device kernel alone (detail::reduce_buffers) over
//                    the first K inputs into the first K outputs, K = 2, 4, 8,
//                    timed with events on its stream; the joins of the other
//                    logical GPUs' streams before and after are part of it.
//                    It moves 2K·S bytes, so its bound is 2K·S / B = K·t_copy.
//   on_device_all_reduce  the whole cross_device_ops path,
//                    on_device_all_reduce().reduce(SUM, K inputs, their
//                    devices): outputs allocated per call (from the caching
//                    pools), wall time including the final synchronization
//                    of every replica's stream.
//   nccl_single_rank ncclAllReduce on a one-rank communicator of GPU 0 (time
//                    only: one rank moves nothing between GPUs).
//   nccl_all_reduce  with two physical GPUs or more: nccl_all_reduce().reduce
//                    over the first logical GPU of each (wall time; the call
//                    waits for the collective).
//
// Each arm is warmed up and its result checked (first, middle and last
// element against the closed-form sum; a wrong value throws). Then --rounds
// rounds run the arms in turn, copy first, each a fixed number of calls (more
// for small S); figures are medians over rounds, and "of bound" is the median
// of the per-round ratios K·t_copy / t, each against the copy of its own
// round. algbw = S / t, busbw = algbw·2(n-1)/n (nccl-tests), GB = 1e9 B.
// Sizes whose buffers do not fit the free memory are skipped, said so.

#include "lockstep/lockstep.hpp"

#include "bench_support.hpp"
#include "devices/cuda/cuda_check.hpp"
#include "devices/cuda/cuda_places.hpp"
#include "devices/device_registry.hpp"
#if LOCKSTEP_HAVE_NCCL
#include "devices/cuda/nccl_check.hpp"
#endif

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using lockstep::tensor;
using lockstep::bench::size_string;
using lockstep::bench::summarize;
using lockstep::bench::summary;
namespace detail = lockstep::detail;

constexpr std::size_t mib = 1024 * 1024;
constexpr std::size_t max_replicas = 8;
constexpr std::size_t replica_counts[] = {2, 4, 8};
constexpr std::size_t target_bytes = 64 * mib; // the target applies from here up
constexpr double bound_target = 0.85;

struct options {
  std::size_t rounds = 5;
  std::size_t max_bytes = 1024 * mib;
  std::string json;
  bool quick = false;
};

constexpr std::string_view usage = R"(usage: gpu_allreduce [options]
  --rounds N        rounds of alternating arms; figures are medians (default 5)
  --max-bytes B     largest size per replica; sizes are 4 B times powers of 4
                    (default 1073741824 = 1 GiB)
  --json FILE       also write {"rows": [...], "targets": [...]} to FILE
  --quick           4 B, 1 MiB and 64 MiB only, fewer calls: a smoke run
Exits 77 where the process sees no CUDA device.
)";

options parse_options(int argc, char** argv) {
  options opts;
  std::vector<char*> rest{argv[0]}; // --quick takes no value: parse_flags never sees it
  for (int i = 1; i < argc; ++i)
    if (std::string_view{argv[i]} == "--quick")
      opts.quick = true;
    else
      rest.push_back(argv[i]);
  lockstep::bench::parse_flags(static_cast<int>(rest.size()), rest.data(), usage,
                               [&](std::string_view flag, std::string_view value) {
    if (flag == "--rounds")
      opts.rounds = lockstep::bench::parse_count(flag, value);
    else if (flag == "--max-bytes")
      opts.max_bytes = std::max<std::size_t>(4, lockstep::bench::parse_count(flag, value));
    else if (flag == "--json")
      opts.json = value;
    else
      return false;
    return true;
  });
  return opts;
}

/// Calls per arm and round: about 512 MiB of input (128 MiB with --quick),
/// between 5 and 1000 calls.
std::size_t calls_for(std::size_t bytes, const options& opts) {
  const auto budget = (opts.quick ? 128 : 512) * mib;
  return std::clamp<std::size_t>(budget / bytes, opts.quick ? 3 : 5, opts.quick ? 200 : 1000);
}

// -- timing ---------------------------------------------------------------------

/// Seconds per call of `calls` calls of `f`, between two events on `stream`
/// (of the current CUDA device).
class event_timer {
public:
  explicit event_timer(cudaStream_t stream) : stream_(stream) {
    LOCKSTEP_CUDA_CHECK(cudaEventCreate(&start_));
    LOCKSTEP_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~event_timer() {
    (void) cudaEventDestroy(start_);
    (void) cudaEventDestroy(stop_);
  }
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;

  double seconds_per_call(std::size_t calls, const std::function<void()>& f) {
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(start_, stream_));
    for (std::size_t i = 0; i < calls; ++i)
      f();
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    detail::wait_for_event(stop_, "gpu_allreduce: timed calls");
    float ms = 0;
    LOCKSTEP_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return static_cast<double>(ms) / 1e3 / static_cast<double>(calls);
  }

private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

/// Waits until the work so far of every logical GPU in `devices` has run.
void synchronize(const std::vector<lockstep::device_spec>& devices) {
  for (const auto& d : devices)
    detail::synchronize_place(detail::place_of(d), "gpu_allreduce: synchronize");
}

/// Wall seconds per call of `calls` calls of `f`, from idle devices until
/// `devices` have run everything.
double wall_seconds_per_call(std::size_t calls, const std::vector<lockstep::device_spec>& devices,
                             const std::function<void()>& f) {
  synchronize(devices);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < calls; ++i)
    f();
  synchronize(devices);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / static_cast<double>(calls);
}

/// Throws unless elements 0, n/2 and n-1 of the float32 CUDA tensor `t`
/// equal `want` (small whole numbers: exact).
void expect(const tensor& t, float want, const std::string& what) {
  auto& place = detail::place_of(t.device());
  detail::synchronize_place(place, "gpu_allreduce: check");
  detail::cuda_device_guard guard{place.physical};
  const auto n = t.num_elements();
  for (const auto i : {std::int64_t{0}, n / 2, n - 1}) {
    float got = 0;
    LOCKSTEP_CUDA_CHECK(cudaMemcpy(&got, t.buffer().data() + static_cast<std::size_t>(i) * 4, 4,
                                   cudaMemcpyDeviceToHost));
    if (got != want)
      throw std::runtime_error(what + ": element " + std::to_string(i) + " on "
                               + t.device().to_string() + " is " + std::to_string(got)
                               + ", expected " + std::to_string(want));
  }
}

float sum_of_first(std::size_t k) { // replica r holds r + 1
  return static_cast<float>(k * (k + 1) / 2);
}

// -- arms and rows -------------------------------------------------------------

struct arm {
  std::string name; // copy, reduce_buffers, on_device_all_reduce, nccl_single_rank, nccl_all_reduce
  std::size_t ranks;
  std::function<double(std::size_t calls)> time; // seconds per call
  std::function<void()> check;                   // after the warm-up
  std::vector<double> seconds{};                 // one per round
};

struct row {
  std::string arm;
  std::size_t ranks = 1;
  std::size_t bytes = 0;
  std::size_t calls = 0;
  summary time_us;
  double copy_gbs = 0; // median over rounds of B = 2S / t_copy
  double fraction = 0; // median over rounds of K·t_copy / t (reductions on GPU 0)

  double algbw_gbs() const { return static_cast<double>(bytes) / time_us.median / 1e3; }
  double busbw_gbs() const {
    return algbw_gbs() * 2.0 * static_cast<double>(ranks - 1) / static_cast<double>(ranks);
  }
  double bound_us() const { return 2e-3 * static_cast<double>(ranks * bytes) / copy_gbs; }
  bool bounded() const { return arm == "reduce_buffers" || arm == "on_device_all_reduce"; }
};

row make_row(const arm& a, const arm& copy, std::size_t bytes, std::size_t calls) {
  row r{a.name, a.ranks, bytes, calls, {}, 0, 0};
  std::vector<double> us, gbs, fractions;
  for (std::size_t i = 0; i < a.seconds.size(); ++i) {
    us.push_back(a.seconds[i] * 1e6);
    gbs.push_back(2.0 * static_cast<double>(bytes) / copy.seconds[i] / 1e9);
    fractions.push_back(static_cast<double>(a.ranks) * copy.seconds[i] / a.seconds[i]);
  }
  r.time_us = summarize(us);
  r.copy_gbs = summarize(gbs).median;
  if (r.bounded())
    r.fraction = summarize(fractions).median;
  return r;
}

std::string fixed(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, x >= 100 ? "%.0f" : "%.2f", x);
  return buf;
}

void print_table(const std::vector<row>& rows, std::string_view arm, std::string_view title) {
  if (std::none_of(rows.begin(), rows.end(), [&](const row& r) { return r.arm == arm; }))
    return;
  const bool copy = arm == "copy";
  const bool time_only = arm == "nccl_single_rank";
  std::printf("\n%s\n\n", std::string(title).c_str());
  if (copy)
    std::printf("| S | calls | time us | range us | B GB/s |\n|---:|---:|---:|---|---:|\n");
  else if (time_only)
    std::printf("| S | calls | time us | range us | copy us |\n|---:|---:|---:|---|---:|\n");
  else
    std::printf("| S | n | calls | time us | range us | algbw GB/s | busbw GB/s | B GB/s "
                "| bound us | of bound |\n|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n");
  for (const auto& r : rows) {
    if (r.arm != arm)
      continue;
    const auto range = "[" + fixed(r.time_us.min) + "-" + fixed(r.time_us.max) + "]";
    if (copy || time_only)
      std::printf("| %s | %zu | %s | %s | %s |\n", size_string(r.bytes).c_str(), r.calls,
                  fixed(r.time_us.median).c_str(), range.c_str(),
                  fixed(copy ? r.copy_gbs : 2e-3 * static_cast<double>(r.bytes) / r.copy_gbs)
                    .c_str());
    else
      std::printf("| %s | %zu | %zu | %s | %s | %s | %s | %s | %s | %s |\n",
                  size_string(r.bytes).c_str(), r.ranks, r.calls, fixed(r.time_us.median).c_str(),
                  range.c_str(), fixed(r.algbw_gbs()).c_str(), fixed(r.busbw_gbs()).c_str(),
                  fixed(r.copy_gbs).c_str(), r.bounded() ? fixed(r.bound_us()).c_str() : "",
                  r.bounded() ? (fixed(100 * r.fraction) + "%").c_str() : "");
  }
}

#if LOCKSTEP_HAVE_NCCL
/// A one-rank NCCL communicator on physical GPU 0.
struct single_rank_communicator {
  ncclComm_t comm = nullptr;
  single_rank_communicator() {
    const int device = 0;
    LOCKSTEP_NCCL_CHECK(ncclCommInitAll(&comm, 1, &device));
  }
  ~single_rank_communicator() { (void) ncclCommDestroy(comm); }
  single_rank_communicator(const single_rank_communicator&) = delete;
  single_rank_communicator& operator=(const single_rank_communicator&) = delete;
};
#endif

/// What every size's arms use.
struct setup {
  std::vector<lockstep::device_spec> replicas;    // the logical GPUs of GPU 0
  std::vector<lockstep::device_spec> one_per_gpu; // the first logical GPU of each physical one
  detail::cuda_place& place0;
  event_timer timer{place0.stream};
  lockstep::on_device_all_reduce on_device{};
#if LOCKSTEP_HAVE_NCCL
  single_rank_communicator single_rank{};
  std::unique_ptr<lockstep::nccl_all_reduce> nccl_gpus{
    one_per_gpu.size() >= 2 ? std::make_unique<lockstep::nccl_all_reduce>() : nullptr};
#endif
};

/// The rows of size `bytes`: fills the buffers, warms up and checks each
/// arm, runs the rounds. Every buffer is gone when it returns.
std::vector<row> measure_size(setup& at, std::size_t bytes, std::size_t calls,
                              const options& opts) {
  const auto n = static_cast<std::int64_t>(bytes / 4);
  const auto& replicas = at.replicas;
  auto& stream = at.place0.stream;
  std::vector<tensor> inputs, outputs;
  {
    const auto base = tensor::filled(lockstep::dtype::f32, {n}, 1.0, replicas[0]);
    for (std::size_t k = 0; k < max_replicas; ++k) {
      inputs.push_back(k == 0 ? base : base.to(replicas[k]));
      if (k > 0)
        lockstep::scale_into(inputs.back(), static_cast<double>(k + 1));
      outputs.push_back(tensor::uninitialized(lockstep::dtype::f32, {n}, replicas[k]));
    }
  }
  void* const copy_to = outputs[0].buffer().data();
  const void* const copy_from = inputs[0].buffer().data();

  std::vector<arm> arms;
  arms.push_back({"copy", 1,
                  [&](std::size_t c) {
                    return at.timer.seconds_per_call(c, [&] {
                      LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(copy_to, copy_from, bytes,
                                                          cudaMemcpyDeviceToDevice, stream));
                    });
                  },
                  [&] { expect(outputs[0], 1, "copy"); }});
  for (const auto k : replica_counts) {
    const std::span<const tensor> in{inputs.data(), k};
    const std::span<tensor> out{outputs.data(), k};
    arms.push_back({"reduce_buffers", k,
                    [&, in, out](std::size_t c) {
                      return at.timer.seconds_per_call(c, [&] {
                        detail::reduce_buffers(lockstep::reduce_op::sum, in, out);
                      });
                    },
                    [k, out] {
                      for (const auto& t : out)
                        expect(t, sum_of_first(k), "reduce_buffers, K = " + std::to_string(k));
                    }});
  }
  for (const auto k : replica_counts) {
    const auto first_k = static_cast<std::ptrdiff_t>(k);
    const lockstep::per_replica<tensor> value{
      std::vector<tensor>(inputs.begin(), inputs.begin() + first_k)};
    const lockstep::destinations destination{value};
    arms.push_back({"on_device_all_reduce", k,
                    [&, value, destination](std::size_t c) {
                      return wall_seconds_per_call(c, destination.devices(), [&] {
                        (void) at.on_device.reduce(lockstep::reduce_op::sum, value, destination);
                      });
                    },
                    [&, k, value, destination] {
                      const auto result =
                        at.on_device.reduce(lockstep::reduce_op::sum, value, destination);
                      for (const auto& t : result.values())
                        expect(t, sum_of_first(k),
                               "on_device_all_reduce, K = " + std::to_string(k));
                    }});
  }
#if LOCKSTEP_HAVE_NCCL
  arms.push_back({"nccl_single_rank", 1,
                  [&](std::size_t c) {
                    return at.timer.seconds_per_call(c, [&] {
                      LOCKSTEP_NCCL_CHECK(ncclAllReduce(copy_from, copy_to,
                                                        static_cast<std::size_t>(n), ncclFloat32,
                                                        ncclSum, at.single_rank.comm, stream));
                    });
                  },
                  [&] { expect(outputs[0], 1, "nccl_single_rank"); }});
  if (at.nccl_gpus) {
    std::vector<tensor> gpu_inputs{inputs[0]};
    for (std::size_t p = 1; p < at.one_per_gpu.size(); ++p) {
      gpu_inputs.push_back(inputs[0].to(at.one_per_gpu[p]));
      lockstep::scale_into(gpu_inputs.back(), static_cast<double>(p + 1));
    }
    const lockstep::per_replica<tensor> value{std::move(gpu_inputs)};
    const lockstep::destinations destination{value};
    arms.push_back({"nccl_all_reduce", at.one_per_gpu.size(),
                    [&, value, destination](std::size_t c) {
                      return wall_seconds_per_call(c, at.one_per_gpu, [&] {
                        (void) at.nccl_gpus->reduce(lockstep::reduce_op::sum, value, destination);
                      });
                    },
                    [&, value, destination] {
                      const auto result =
                        at.nccl_gpus->reduce(lockstep::reduce_op::sum, value, destination);
                      for (const auto& t : result.values())
                        expect(t, sum_of_first(at.one_per_gpu.size()), "nccl_all_reduce");
                    }});
  }
#endif

  for (auto& a : arms) {
    (void) a.time(std::max<std::size_t>(2, calls / 4)); // warm-up
    a.check();
  }
  for (std::size_t round = 0; round < opts.rounds; ++round)
    for (auto& a : arms)
      a.seconds.push_back(a.time(calls));
  std::vector<row> rows;
  for (const auto& a : arms)
    rows.push_back(make_row(a, arms.front(), bytes, calls));
  return rows;
}

} // namespace

int main(int argc, char** argv) {
  try {
    const auto opts = parse_options(argc, argv);
    const auto run_start = std::chrono::steady_clock::now();
    if (lockstep::physical_gpu_count() == 0) {
      std::printf("gpu_allreduce: skipped (exit 77): this process sees no CUDA device "
                  "(CUDA_VISIBLE_DEVICES applies, or lockstep has no CUDA backend)\n");
      return 77;
    }
    // The layout is fixed by the first GPU tensor: split GPU 0 first.
    const auto replicas = lockstep::gpu_devices(static_cast<int>(max_replicas), 0);
    const int physical = lockstep::physical_gpu_count();
    std::vector<lockstep::device_spec> one_per_gpu; // the first logical GPU of each physical one
    for (int p = 0; p < physical; ++p)
      one_per_gpu.push_back(detail::logical_gpus_of(p).front());

    auto& place0 = detail::place_of(replicas[0]);
    detail::cuda_device_guard device0{place0.physical};
    cudaDeviceProp properties{};
    LOCKSTEP_CUDA_CHECK(cudaGetDeviceProperties(&properties, place0.physical));
    int runtime_version = 0;
    LOCKSTEP_CUDA_CHECK(cudaRuntimeGetVersion(&runtime_version));
    int nccl_version = 0;
#if LOCKSTEP_HAVE_NCCL
    LOCKSTEP_NCCL_CHECK(ncclGetVersion(&nccl_version));
#endif
    std::printf("gpu_allreduce: SUM of float32 over K logical GPUs of one physical GPU "
                "(gpu_devices(%zu, 0)), median over %zu rounds of alternating arms; "
                "GB = 1e9 B\n",
                max_replicas, opts.rounds);
    std::printf("device: %s, %d SMs, %.1f GiB; CUDA runtime %d; NCCL %d; %d physical GPU%s\n",
                properties.name, properties.multiProcessorCount,
                static_cast<double>(properties.totalGlobalMem) / (1024.0 * mib), runtime_version,
                nccl_version, physical, physical == 1 ? "" : "s");
    std::fflush(stdout);

    std::vector<std::size_t> sizes{4, mib, 64 * mib};
    if (!opts.quick)
      for (std::size_t s = 16; s <= opts.max_bytes && s <= (std::size_t{1} << 40); s *= 4)
        sizes.push_back(s);
    std::ranges::sort(sizes);
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    std::erase_if(sizes, [&](std::size_t s) { return s > opts.max_bytes; });

    setup at{replicas, one_per_gpu, place0};
    std::vector<row> rows;
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto bytes : sizes) {
      // 8 inputs, 8 outputs, up to 8 results of the cross_device_ops path
      // and NCCL's outputs: 25·S, and room for NCCL and the allocator.
      const auto needed = (3 * max_replicas + 1) * bytes + 512 * mib;
      std::size_t free = 0, total = 0;
      LOCKSTEP_CUDA_CHECK(cudaMemGetInfo(&free, &total));
      if (needed > free) {
        std::printf("%s: skipped, needs %s of the %s free\n", size_string(bytes).c_str(),
                    size_string(needed).c_str(), size_string(free).c_str());
        skipped.push_back({{"bytes", bytes}, {"needed_bytes", needed}, {"free_bytes", free}});
        continue;
      }
      const auto calls = calls_for(bytes, opts);
      std::fprintf(stderr, "%s: %zu calls per arm and round\n", size_string(bytes).c_str(), calls);
      for (auto& r : measure_size(at, bytes, calls, opts))
        rows.push_back(std::move(r));
      // The next size's blocks are of another class: give these back.
      for (const auto& d : replicas)
        (void) lockstep::release_cached_memory(d);
      for (std::size_t p = 1; p < one_per_gpu.size(); ++p)
        (void) lockstep::release_cached_memory(one_per_gpu[p]);
    }

    print_table(rows, "copy", "Copy baseline: cudaMemcpyAsync device to device of S bytes on "
                              "one stream, B = 2S/t (read + written)");
    print_table(rows, "reduce_buffers",
                "On-device reduction kernel alone (detail::reduce_buffers, n = K inputs into K "
                "outputs), events on its stream; bound = 2K*S/B of the same rounds");
    print_table(rows, "on_device_all_reduce",
                "on_device_all_reduce().reduce(SUM, K replicas, their devices): outputs "
                "allocated per call, wall time until every replica's stream is done");
    print_table(rows, "nccl_single_rank", "ncclAllReduce on a one-rank communicator "
                                          "(time only), next to the copy of S bytes");
    print_table(rows, "nccl_all_reduce", "nccl_all_reduce().reduce over one logical GPU per "
                                         "physical GPU, wall time");

    nlohmann::json targets = nlohmann::json::array();
    std::printf("\n| target | measured | limit | |\n|---|---:|---:|---|\n");
    for (const auto& r : rows)
      if (r.arm == "reduce_buffers" && r.bytes >= target_bytes) {
        const auto what = "on-device reduction of " + std::to_string(r.ranks) + " buffers of "
                          + size_string(r.bytes) + ": >= 85% of its bound 2K*S/B";
        const bool pass = r.fraction >= bound_target;
        std::printf("| %s | %.1f %% | >= %.0f %% | %s |\n", what.c_str(), 100 * r.fraction,
                    100 * bound_target, pass ? "pass" : "FAIL");
        targets.push_back({{"target", what}, {"measured", 100 * r.fraction},
                           {"limit", 100 * bound_target}, {"at_least", true}, {"unit", "%"},
                           {"pass", pass}});
      }
    if (targets.empty())
      std::printf("| (no size of %s or more was measured) | | | |\n",
                  size_string(target_bytes).c_str());

    if (!opts.json.empty()) {
      nlohmann::json json_rows = nlohmann::json::array();
      for (const auto& r : rows) {
        nlohmann::json j{{"arm", r.arm}, {"ranks", r.ranks}, {"bytes", r.bytes},
                         {"calls", r.calls}, {"time_us", r.time_us.median},
                         {"time_us_min", r.time_us.min}, {"time_us_max", r.time_us.max},
                         {"copy_gbs", r.copy_gbs}};
        if (r.arm != "copy" && r.arm != "nccl_single_rank") {
          j["algbw_gbs"] = r.algbw_gbs();
          j["busbw_gbs"] = r.busbw_gbs();
        }
        if (r.bounded()) {
          j["bound_us"] = r.bound_us();
          j["fraction_of_bound"] = r.fraction;
        }
        json_rows.push_back(std::move(j));
      }
      nlohmann::json out{
        {"benchmark", "gpu_allreduce"},
        {"device", {{"name", properties.name}, {"multiprocessors", properties.multiProcessorCount},
                    {"memory_bytes", properties.totalGlobalMem},
                    {"cuda_runtime", runtime_version}, {"nccl", nccl_version},
                    {"physical_gpus", physical}, {"logical_gpus_on_gpu0", max_replicas}}},
        {"rounds", opts.rounds}, {"rows", std::move(json_rows)}, {"skipped", skipped},
        {"targets", targets},
        {"method",
         {{"time_us", "median over rounds of the time per call; arms alternate within a "
                      "round (copy first); copy, reduce_buffers and nccl_single_rank: events on "
                      "logical GPU 0's stream around `calls` calls; on_device_all_reduce and "
                      "nccl_all_reduce: wall time of `calls` calls until every replica's stream "
                      "is done"},
          {"copy_gbs", "median over the same rounds of 2 * bytes / (time of a device-to-device "
                       "cudaMemcpyAsync of bytes)"},
          {"algbw_gbs", "bytes / time_us (bytes per replica), GB = 1e9 B"},
          {"busbw_gbs", "algbw_gbs * 2(ranks-1)/ranks (nccl-tests)"},
          {"fraction_of_bound", "median over rounds of (2 * ranks * bytes / B_round) / "
                                "time_round = ranks * copy_time_round / time_round"}}}};
      lockstep::bench::write_json_file(opts.json, out.dump(2));
      std::printf("\nwrote %s\n", opts.json.c_str());
    }
    const std::chrono::duration<double> total_s = std::chrono::steady_clock::now() - run_start;
    std::printf("\ntotal %.0f s\n", total_s.count());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_allreduce: %s\n", e.what());
    return 1;
  }
}

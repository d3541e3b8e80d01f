// allreduce --workers LIST: the all-reduce between W worker processes on
// this host, each a multi_worker_mirrored_strategy with K CPU replicas
// (--replicas-per-worker, 1 by default), through the public API as an
// application runs it: the rendezvous, the authenticated loopback ring,
// the in-process stages around it.
//
// For each W the benchmark forks W processes (worker_processes.hpp); they
// meet at a coordinator on a free loopback port. For each size S every
// replica holds S bytes of float32 (its global replica id + 1 in every
// element): a first all-reduce is checked against the closed form
// N(N+1)/2 for N = W·K replicas, then zeros are reduced (a SUM that stays
// 0). A calibration of 3 calls sets
// K, the calls in a repetition of about --budget-ms (at least 3) (the largest K any
// worker wants, agreed through strategy.reduce); each repetition is one
// `strategy.run` in which the replica first meets the others in a 4-byte
// all-reduce and then runs K in-place ctx.all_reduce calls, timed on the
// replica thread. Rank 0 reports the median time per call over --reps
// repetitions. algbw = S / t, busbw = algbw * 2(W-1)/W (nccl-tests'
// definitions, GB = 1e9 B).
//
// The bound, measured first in the same run (network.md §1.5): the total
// payload rate P of two concurrent opposite loopback TCP streams of 64 MiB
// messages; a ring all-reduce moves 2(W-1)·S bytes through loopback, so
// algbw <= P / 2(W-1). `bench/tcp_ring` times the ring alone, without the
// strategy.
//
// --workers launcher: the same figures from the ranks of a job that a
// launcher started, each process one worker, the cluster from the
// environment as any lockstep program reads it. This is how the strategy
// runs over MPI's collectives (LOCKSTEP_COMMUNICATOR=mpi, which needs the
// workers to be one mpirun job): tools/compare_tcp.sh runs it under the
// same mpirun settings as its raw MPI_Allreduce. No bound there: the
// workers may sit on several hosts.

#include "allreduce_workers.hpp"

#include "bench_support.hpp"
#include "worker_processes.hpp"

#include "lockstep/lockstep.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

namespace lockstep::bench {

namespace {

using clock_type = std::chrono::steady_clock;

/// A loopback port that was free a moment ago, for the coordinator.
std::uint16_t free_port() {
  const auto [fd, port] = listen_on_loopback();
  if (fd < 0)
    throw std::runtime_error("allreduce --workers: no free loopback port");
  ::close(fd);
  return port;
}

/// Seconds per all-reduce of each size: one worker's figures, the worker
/// of `resolver`'s cluster of `world` workers.
std::vector<double> worker_times(const cluster_resolver& resolver, std::size_t world,
                                 const worker_table_options& options) {
  multi_worker_mirrored_strategy strategy{resolver,
                                          {.local_devices = cpu_devices(
                                            static_cast<int>(options.replicas_per_worker))}};
  std::vector<double> results;
  for (const auto size : options.sizes) {
    const auto elements = static_cast<std::int64_t>(size / 4);
    const auto replicas = world * options.replicas_per_worker;
    const auto expected = static_cast<float>(replicas * (replicas + 1) / 2);
    const auto checked = strategy.run([&](replica_context& ctx) {
      auto sum = ctx.all_reduce(
        reduce_op::sum,
        tensor::filled(dtype::f32, {elements},
                       static_cast<double>(ctx.replica_id_in_sync_group() + 1), current_device()));
      const auto values = sum.data<float>();
      return std::all_of(values.begin(), values.end(), [&](float x) { return x == expected; });
    });
    for (const auto ok : checked.values())
      if (!ok)
        throw std::runtime_error(size_string(size) + ": the sum is not N(N+1)/2");
    // Seconds per call over `calls` in-place all-reduces, after a meeting.
    const auto timed = [&](std::int64_t calls) {
      return strategy.run([&](replica_context& ctx) {
        // Zeroed (its pages touched) before the meeting, so that the clock
        // starts on every worker together, as the peers' do.
        auto buffer = tensor::zeros(dtype::f32, {elements}, current_device());
        ctx.all_reduce(reduce_op::sum, tensor::zeros(dtype::f32, {}, current_device()));
        const auto start = clock_type::now();
        for (std::int64_t c = 0; c < calls; ++c)
          buffer = ctx.all_reduce(reduce_op::sum, std::move(buffer));
        const std::chrono::duration<double> seconds = clock_type::now() - start;
        return seconds.count() / static_cast<double>(calls);
      })[0];
    };
    const auto probe = std::max(timed(3), 1e-7);
    // At least 3 calls a repetition, as the peers time theirs: one call
    // alone after the meeting is a cold start (at 64 MiB over MPI, ~1.3x).
    const auto wanted = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(static_cast<double>(options.budget_ms) / 1000.0 / probe), 3,
      100000);
    const auto calls = strategy.reduce(reduce_op::max, wanted); // the same on every worker
    std::vector<double> samples;
    for (std::size_t rep = 0; rep < options.reps; ++rep)
      samples.push_back(timed(calls));
    results.push_back(summarize(samples).median);
  }
  return results;
}

/// Worker `rank` of `world` forked on this host, meeting at `port`.
std::vector<double> forked_worker_times(std::size_t rank, std::size_t world, std::uint16_t port,
                                        const worker_table_options& options) {
  cluster_options cluster;
  cluster.world_size = world;
  cluster.rank = rank;
  cluster.local_world_size = world; // all on this host
  cluster.local_rank = rank;
  cluster.coordinator = "127.0.0.1:" + std::to_string(port);
  cluster.listen = "127.0.0.1:0";
  cluster.job_id = "bench-allreduce-" + std::to_string(port);
  return worker_times(cluster_resolver{cluster, {}}, world, options);
}

/// The JSON row of `seconds` per all-reduce of `bytes` among `world` workers.
nlohmann::json row_of(std::size_t world, std::size_t bytes, double seconds,
                      const worker_table_options& options, const worker_figures& f) {
  nlohmann::json row{{"workers", world},
                     {"replicas_per_worker", options.replicas_per_worker},
                     {"bytes", bytes},
                     {"seconds", seconds},
                     {"algbw_gbs", f.algbw / 1e9},
                     {"busbw_gbs", f.busbw / 1e9},
                     {"bound_gbs", nullptr}};
  if (f.bound > 0)
    row["bound_gbs"] = f.bound / 1e9;
  return row;
}

/// Writes the rows; `bound_rate` 0: no bound measured (null).
void write_rows(const std::string& path, double bound_rate, const nlohmann::json& rows) {
  nlohmann::json out;
  out["bound_gbs_total"] = nullptr;
  if (bound_rate > 0)
    out["bound_gbs_total"] = bound_rate / 1e9;
  out["rows"] = rows;
  out["targets"] = nlohmann::json::array(); // the comparison with peers adds them
  write_json_file(path, out.dump(2));
}

} // namespace

int run_between_workers(const worker_table_options& options) {
  const auto rates = loopback_stream_rates(options.reps, options.budget_ms);
  if (rates.empty()) {
    std::fprintf(stderr, "allreduce: the bound's processes failed\n");
    return 1;
  }
  const auto rate = summarize(rates).median;
  std::printf("allreduce --workers: SUM of float32 between worker processes on this host, "
              "multi_worker_mirrored_strategy with %zu CPU replica(s) each (ctx.all_reduce in "
              "place, bytes per replica), median of %zu reps of ~%zu ms; GB = 1e9 B\n",
              options.replicas_per_worker, options.reps, options.budget_ms);
  std::printf("bound: two opposite loopback streams of 64 MiB messages move %.2f GB/s in all; "
              "algbw <= that / 2(W-1)\n\n",
              rate / 1e9);
  print_worker_table_header();
  std::fflush(stdout);
  auto rows = nlohmann::json::array();
  for (const auto world : options.workers) {
    const auto port = free_port();
    const auto seconds = run_processes(world, options.sizes.size(), [&](std::size_t rank) {
      return forked_worker_times(rank, world, port, options);
    });
    if (seconds.empty()) {
      std::fprintf(stderr, "allreduce: a worker of %zu failed\n", world);
      return 1;
    }
    for (std::size_t i = 0; i < options.sizes.size(); ++i) {
      const auto f = print_worker_row(world, options.sizes[i], seconds[i], rate);
      rows.push_back(row_of(world, options.sizes[i], seconds[i], options, f));
    }
    std::fflush(stdout);
  }
  if (!options.json.empty()) {
    write_rows(options.json, rate, rows);
    std::printf("\nwrote %s\n", options.json.c_str());
  }
  return 0;
}

int run_as_launched_worker(const worker_table_options& options) {
  std::size_t rank = 0;
  try {
    const cluster_resolver resolver;
    rank = resolver.spec().rank;
    const auto world = resolver.spec().world_size;
    if (world < 2)
      throw std::invalid_argument("the cluster (from " + resolver.spec().source + ") has "
                                  + std::to_string(world) + " worker; start every worker "
                                  "under a launcher, e.g. mpirun -np 2 -x "
                                  "LOCKSTEP_COORDINATOR=127.0.0.1:PORT allreduce --workers "
                                  "launcher");
    const char* communicator = std::getenv("LOCKSTEP_COMMUNICATOR");
    if (rank == 0) {
      std::printf("allreduce --workers launcher: SUM of float32 between the %zu workers of a "
                  "launched job (cluster from %s; LOCKSTEP_COMMUNICATOR=%s), "
                  "multi_worker_mirrored_strategy with %zu CPU replica(s) each (ctx.all_reduce "
                  "in place, bytes per replica), median of %zu reps of ~%zu ms; GB = 1e9 B; "
                  "no bound measured\n\n",
                  world, resolver.spec().source.c_str(),
                  communicator != nullptr ? communicator : "(unset: lockstep)",
                  options.replicas_per_worker, options.reps, options.budget_ms);
      print_worker_table_header();
      std::fflush(stdout);
    }
    const auto seconds = worker_times(resolver, world, options);
    if (rank != 0)
      return 0;
    auto rows = nlohmann::json::array();
    for (std::size_t i = 0; i < options.sizes.size(); ++i) {
      const auto f = print_worker_row(world, options.sizes[i], seconds[i], 0.0);
      rows.push_back(row_of(world, options.sizes[i], seconds[i], options, f));
    }
    if (!options.json.empty()) {
      write_rows(options.json, 0.0, rows);
      std::printf("\nwrote %s\n", options.json.c_str());
    }
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce --workers launcher: worker %zu: %s\n", rank, e.what());
    return 1;
  }
}

} // namespace lockstep::bench

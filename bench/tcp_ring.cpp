// tcp_ring: the all-reduce between worker processes on this host over the
// authenticated loopback TCP ring (src/collectives/ring_collectives.hpp over
// src/transport/tcp/tcp_link.hpp),
// next to the bound the kernel allows, measured in the same run.
//
// How it works. For each worker count W the benchmark forks W processes.
// Each listens on a loopback port opened before the fork, connects the ring
// (connect_ring: handshake on a fixed token) and, for each size S, runs
// in-place float32 SUM all-reduces of S bytes: the first is checked element
// by element against the closed form, then a calibration picks the number
// of calls K for a repetition of about --budget-ms (rank 0 decides and
// broadcasts it), then --reps repetitions of K calls, each started by a
// ring agreement so the ranks start together. Rank 0 reports the median
// time per call over repetitions. algbw = S / t; busbw = algbw · 2(W−1)/W
// (nccl-tests' definitions, GB = 1e9 B).
//
// The bound (network.md §1.5): a ring all-reduce pushes 2(W−1)·S bytes
// through loopback TCP, each copied into and out of the kernel on a 2-core
// box. Measured first (worker_processes.hpp): two processes, each sending
// 64 MiB messages to the other while receiving the other's (two opposite
// streams, the ring's own exchange), for about --budget-ms; the total
// payload rate P (both directions) is the most the box moves. The bound on
// algbw is P / (2(W−1)); "of bound" is algbw over it. The median of --reps
// samples.
//
// Internals only (tcp_link, ring_all_reduce): the strategy over this ring
// comes with the multi-worker strategy.

#include "collectives/ring_collectives.hpp"
#include "transport/tcp/tcp_link.hpp"

#include "bench_support.hpp"
#include "worker_processes.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace lockstep::detail;
using lockstep::bench::loopback_stream_rates;
using lockstep::bench::parse_count;
using lockstep::bench::parse_flags;
using lockstep::bench::parse_list;
using lockstep::bench::print_worker_row;
using lockstep::bench::print_worker_table_header;
using lockstep::bench::run_processes;
using lockstep::bench::summarize;
using clock_type = std::chrono::steady_clock;

struct options {
  std::vector<std::size_t> workers{2, 4};
  std::vector<std::size_t> sizes{4, 4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  std::size_t reps = 5;
  std::size_t budget_ms = 300;
};

constexpr std::string_view usage = R"(usage: tcp_ring [options]
  --workers LIST   worker process counts, at least 2 (default 2,4)
  --sizes LIST     bytes per worker, multiples of 4 (default 4 .. 64 MiB)
  --reps N         repetitions per size (default 5)
  --budget-ms MS   time per repetition (default 300)
)";

const bytes token = [] {
  const std::string text = "tcp-ring-benchmark-token";
  return bytes(text.begin(), text.end());
}();

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// Connects rank `rank` of a ring of `world` processes on loopback.
tcp_link connect_worker(asio::io_context& context, std::size_t rank, std::size_t world,
                          const std::vector<asio::ip::tcp::endpoint>& endpoints, int listen_fd) {
  asio::ip::tcp::acceptor acceptor(context);
  acceptor.assign(asio::ip::tcp::v4(), listen_fd);
  ring_links links{rank, world, tcp_socket(context), tcp_socket(context)};
  connect_ring(links, acceptor, endpoints[(rank + 1) % world], token,
               {"tcp-ring-bench", 0, static_cast<std::uint32_t>(rank)},
               io_clock::now() + std::chrono::seconds{30});
  return tcp_link(std::move(links));
}

/// Rank 0's median seconds per all-reduce, one per size.
std::vector<double> all_reduce_times(tcp_link& links, const options& opts) {
  const auto rank = links.rank();
  const auto world = links.size();
  const auto deadline = [&] { return links.now() + std::chrono::seconds{120}; };
  std::vector<double> results;
  for (const auto size : opts.sizes) {
    const auto elements = size / 4;
    std::vector<float> data(elements);
    const auto as_bytes = [&] {
      return std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(data.data()), size);
    };
    for (std::size_t i = 0; i < elements; ++i)
      data[i] = static_cast<float>(i % 7 + rank);
    ring_all_reduce(links, lockstep::reduce_op::sum, lockstep::dtype::f32, as_bytes(), deadline());
    for (std::size_t i = 0; i < elements; ++i)
      if (data[i] != static_cast<float>(world * (i % 7) + world * (world - 1) / 2)) {
        std::fprintf(stderr, "tcp_ring: worker %zu, %zu bytes: element %zu is %g\n", rank, size, i,
                     static_cast<double>(data[i]));
        std::exit(1);
      }
    // Every rank times the same 3 calls; rank 0's figure sets K for all.
    constexpr std::size_t probes = 3;
    const auto start = clock_type::now();
    for (std::size_t c = 0; c < probes; ++c)
      ring_all_reduce(links, lockstep::reduce_op::sum, lockstep::dtype::f32, as_bytes(),
                      deadline());
    const auto per_call = std::max(seconds_since(start) / probes, 1e-7);
    std::uint64_t k = std::clamp<std::uint64_t>(
      static_cast<std::uint64_t>(opts.budget_ms / 1000.0 / per_call), 1, 100000);
    ring_broadcast(links, 0, {reinterpret_cast<std::uint8_t*>(&k), sizeof k}, deadline());
    std::vector<double> samples;
    collective_fingerprint sync;
    sync.op = "bench";
    for (std::size_t rep = 0; rep < opts.reps; ++rep) {
      ring_agree(links, sync, deadline());
      const auto t0 = clock_type::now();
      for (std::uint64_t c = 0; c < k; ++c)
        ring_all_reduce(links, lockstep::reduce_op::sum, lockstep::dtype::f32, as_bytes(),
                        deadline());
      samples.push_back(seconds_since(t0) / static_cast<double>(k));
    }
    results.push_back(summarize(samples).median);
  }
  return results;
}

/// Runs `work` on each of `world` forked processes connected in a ring;
/// rank 0's figures, or nothing when a worker failed.
template <class Work>
std::vector<double> run_ring(std::size_t world, std::size_t figures, Work work) {
  asio::io_context context;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors;
  std::vector<asio::ip::tcp::endpoint> endpoints;
  for (std::size_t r = 0; r < world; ++r) {
    acceptors.push_back(std::make_unique<asio::ip::tcp::acceptor>(
      context, asio::ip::tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}));
    endpoints.push_back(acceptors.back()->local_endpoint());
  }
  return run_processes(world, figures, [&](std::size_t rank) {
    asio::io_context own;
    auto links = connect_worker(own, rank, world, endpoints, ::dup(acceptors[rank]->native_handle()));
    return work(links);
  });
}

} // namespace

int main(int argc, char** argv) {
  options opts;
  try {
    parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view value) {
      if (flag == "--workers")
        opts.workers = parse_list(flag, value, 2);
      else if (flag == "--sizes")
        opts.sizes = parse_list(flag, value, 4);
      else if (flag == "--reps")
        opts.reps = parse_count(flag, value);
      else if (flag == "--budget-ms")
        opts.budget_ms = parse_count(flag, value);
      else
        return false;
      return true;
    });
    for (const auto size : opts.sizes)
      if (size % 4 != 0)
        throw std::invalid_argument("--sizes: multiples of 4 only");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tcp_ring: %s\n%s", e.what(), std::string(usage).c_str());
    return 2;
  }
  const auto rates = loopback_stream_rates(opts.reps, opts.budget_ms);
  if (rates.empty()) {
    std::fprintf(stderr, "tcp_ring: the bound's processes failed\n");
    return 1;
  }
  const auto rate = summarize(rates).median;
  std::printf("tcp_ring: float32 SUM all-reduce between worker processes over the loopback TCP "
              "ring; median of %zu reps of ~%zu ms\n",
              opts.reps, opts.budget_ms);
  std::printf("bound: two opposite loopback streams of 64 MiB messages move %.2f GB/s in all; "
              "algbw <= that / 2(W-1)\n\n",
              rate / 1e9);
  print_worker_table_header();
  for (const auto world : opts.workers) {
    const auto seconds = run_ring(world, opts.sizes.size(), [&](tcp_link& links) {
      return all_reduce_times(links, opts);
    });
    if (seconds.empty()) {
      std::fprintf(stderr, "tcp_ring: a worker of %zu failed\n", world);
      return 1;
    }
    for (std::size_t i = 0; i < opts.sizes.size(); ++i)
      print_worker_row(world, opts.sizes[i], seconds[i], rate);
  }
  return 0;
}

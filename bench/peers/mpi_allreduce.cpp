// Open MPI's MPI_Allreduce as a peer of bench/allreduce, for
// tools/compare_mpi.sh (shared memory, whatever mpirun selects) and
// tools/compare_tcp.sh (forced onto TCP by its mpirun flags): in-place float
// SUM over MPI_COMM_WORLD, one buffer per rank reused for every operation
// (so it stays in cache, as in the peers' published figures). The transport
// is mpirun's choice; `--variant` only labels the output.
//
//   mpirun -np N mpi_allreduce [--variant LABEL] [--sizes B,B,...]
//                              [--reps R] [--target-ms T]
//
// Per size: one all-reduce on known values is checked exactly (rank r
// holds (r + 1) * (i % 7 + 1), so every element must be n(n+1)/2 times
// (i % 7 + 1)); then a warm-up estimates the time per operation, rank 0
// picks K operations per batch to last about T ms and broadcasts it, and
// R batches of K back-to-back operations are timed on rank 0 between
// barriers. Each batch prints one line:
//
//   CSV,mpi,VARIANT,RANKS,BYTES,K,BATCH,US_PER_OP
//
// Built by tools/compare_mpi.sh and tools/compare_tcp.sh with mpicxx; not
// part of the meson build, which does not depend on MPI.

#include <mpi.h>

#include "peer_common.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct options {
  std::string variant = "default";
  std::vector<std::size_t> sizes{4, 4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  int reps = 3;
  double target_ms = 200;
};

[[noreturn]] void usage_error(const std::string& problem) {
  std::fprintf(stderr, "mpi_allreduce: %s\nusage: mpi_allreduce [--variant LABEL] "
                       "[--sizes B,B,...] [--reps R] [--target-ms T]\n",
               problem.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options opts;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc)
      usage_error(flag + ": missing value");
    const std::string value = argv[++i];
    if (flag == "--variant")
      opts.variant = value;
    else if (flag == "--sizes")
      opts.sizes = peers::parse_sizes(value, SIZE_MAX, usage_error);
    else if (flag == "--reps")
      opts.reps = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--target-ms")
      opts.target_ms = std::max(1.0, std::atof(value.c_str()));
    else
      usage_error("unknown option " + flag);
  }
  return opts;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Checks one all-reduce of known values; the number of wrong elements.
std::size_t check_once(std::vector<float>& buffer, int rank, int ranks) {
  peers::fill_known(buffer, rank);
  MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(buffer.size()), MPI_FLOAT,
                MPI_SUM, MPI_COMM_WORLD);
  return peers::count_wrong(buffer, ranks);
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const auto opts = parse(argc, argv);
  int status = 0;
  for (const auto bytes : opts.sizes) {
    std::vector<float> buffer(bytes / sizeof(float));
    const auto all_reduce = [&] {
      MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(buffer.size()), MPI_FLOAT,
                    MPI_SUM, MPI_COMM_WORLD);
    };
    if (const auto wrong = check_once(buffer, rank, ranks)) {
      std::fprintf(stderr, "mpi_allreduce: rank %d, %zu bytes: %zu wrong elements\n", rank,
                   bytes, wrong);
      status = 1;
    }
    std::fill(buffer.begin(), buffer.end(), 0.0f);
    // Warm-up: the first operation is untimed, the next ones estimate.
    const int warmup = bytes <= 65536 ? 20 : bytes <= (1 << 20) ? 5 : 3;
    all_reduce();
    const auto start = seconds_now();
    for (int i = 1; i < warmup; ++i)
      all_reduce();
    const double per_op = (seconds_now() - start) / (warmup - 1);
    int batch = static_cast<int>(std::clamp(std::ceil(opts.target_ms / 1e3 / per_op), 3.0, 5000.0));
    MPI_Bcast(&batch, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int rep = 0; rep < opts.reps; ++rep) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto begin = seconds_now();
      for (int i = 0; i < batch; ++i)
        all_reduce();
      const auto elapsed = seconds_now() - begin;
      if (rank == 0)
        std::printf("CSV,mpi,%s,%d,%zu,%d,%d,%.3f\n", opts.variant.c_str(), ranks, bytes, batch,
                    rep, elapsed / batch * 1e6);
    }
    std::fflush(stdout);
  }
  MPI_Finalize();
  return status;
}

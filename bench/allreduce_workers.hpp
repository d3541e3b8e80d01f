#pragma once

// allreduce --workers: the all-reduce between worker processes through
// multi_worker_mirrored_strategy (allreduce_workers.cpp): processes it forks
// on this host, or the ranks of a job a launcher started (mpirun).

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep::bench {

struct worker_table_options {
  std::vector<std::size_t> workers; // worker process counts to fork
  bool from_launcher = false;       // instead: this process is one worker of a launched job
  std::vector<std::size_t> sizes;   // bytes per replica, multiples of 4
  std::size_t replicas_per_worker = 1;
  std::size_t reps = 5;
  std::size_t budget_ms = 300;
  std::string json; // also write the rows here, when set
};

/// Prints the table (and writes --json); the process exit status. Call it
/// before this process starts any thread: it forks the workers.
int run_between_workers(const worker_table_options& options);

/// `--workers launcher`: this process is one worker of a job that a
/// launcher started (mpirun, srun, lockstep-run; the cluster as
/// cluster_resolver reads it from the environment; at least 2 workers, else
/// an error naming the cluster's source). Every worker times the
/// same all-reduces; worker 0 prints the table (and writes --json), without
/// the loopback bound. The process exit status.
int run_as_launched_worker(const worker_table_options& options);

} // namespace lockstep::bench

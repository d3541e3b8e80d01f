#pragma once

// allreduce --workers: the all-reduce between worker processes on this host
// through multi_worker_mirrored_strategy (allreduce_workers.cpp).

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep::bench {

struct worker_table_options {
  std::vector<std::size_t> workers; // worker process counts
  std::vector<std::size_t> sizes;   // bytes per replica, multiples of 4
  std::size_t replicas_per_worker = 1;
  std::size_t reps = 5;
  std::size_t budget_ms = 300;
  std::string json; // also write the rows here, when set
};

/// Prints the table (and writes --json); the process exit status. Call it
/// before this process starts any thread: it forks the workers.
int run_between_workers(const worker_table_options& options);

} // namespace lockstep::bench

#pragma once

// topology: where a strategy's replicas are, workers × local devices, one
// replica per device. Everything that counts or numbers replicas derives
// from it: num_replicas_in_sync, a replica's global id, the input_context
// of distributed input, and the devices of variables' copies. In one
// process there is one worker (worker 0 of 1); the multi-worker strategy
// fills in the cluster's.

#include "lockstep/device_spec.hpp"

#include <cstddef>
#include <vector>

namespace lockstep::detail {

struct topology {
  /// Processes that run the same program, each with the same number of
  /// local devices.
  std::size_t workers = 1;
  /// This process's index among them (TF's task id).
  std::size_t worker_index = 0;
  /// TF's is_chief: this worker saves checkpoints and summaries.
  bool is_chief = true;
  /// This worker's devices, one replica each; none: one replica on the
  /// calling thread's current device (the default strategy).
  std::vector<device_spec> local_devices;

  /// Replicas on each worker.
  std::size_t local_replicas() const noexcept {
    return local_devices.empty() ? 1 : local_devices.size();
  }

  /// Replicas in the whole cluster (num_replicas_in_sync).
  std::size_t replicas() const noexcept { return workers * local_replicas(); }

  /// The global id of this worker's local replica `local`:
  /// worker_index · local_replicas() + local.
  std::size_t global_replica_id(std::size_t local) const noexcept {
    return worker_index * local_replicas() + local;
  }
};

} // namespace lockstep::detail

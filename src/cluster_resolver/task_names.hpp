#pragma once

// TF's name of each worker's task in a cluster, the one rule the
// multi-worker strategy (its own devices) and the pod topology (every
// host's) share.

#include "devices/local_task.hpp"

#include "lockstep/cluster_resolver.hpp"

#include <cstddef>

namespace lockstep::detail {

/// The task of rank `rank` of `cluster`: TF_CONFIG's chief is
/// /job:chief/task:0 (rank 0) and its worker i /job:worker/task:i (rank
/// i + 1); every other source numbers /job:worker/task:<rank>. A worker
/// from TF_CONFIG knows there is a chief when its rank is its index + 1.
inline task_name task_name_of(const cluster_spec& cluster, std::size_t rank) {
  const bool has_chief = cluster.task_type == "chief"
                         || (cluster.task_type == "worker" && cluster.rank == cluster.task_index + 1);
  if (has_chief)
    return rank == 0 ? task_name{"chief", 0} : task_name{"worker", static_cast<int>(rank - 1)};
  return task_name{"worker", static_cast<int>(rank)};
}

} // namespace lockstep::detail

#pragma once

#include "lockstep/cluster_resolver.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/strategy.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

namespace lockstep {

/// Settings of a multi-worker strategy.
struct multi_worker_options {
  /// This worker's devices (local names; another task's: value_error), one
  /// replica each, every worker the same number; empty: as mirrored's default.
  std::vector<device_spec> local_devices;
  /// Default deadline of `run` and of each collective; unset:
  /// runtime_options' timeout.
  std::optional<std::chrono::milliseconds> timeout;
  /// How long the workers may take to find each other at the start.
  std::chrono::milliseconds join_timeout{std::chrono::seconds{300}};
  /// A worker silent this long on its control connection is lost.
  std::chrono::milliseconds peer_timeout{std::chrono::seconds{10}};
  /// How often workers send heartbeats (well below peer_timeout).
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds{1}};
};

/// TF's MultiWorkerMirroredStrategy (CollectiveAllReduceStrategy): every
/// worker process runs the same program (docs/multi_worker.md); the replicas,
/// numbered id_in_cluster · local + r, are every worker's local devices (TF's
/// names, /job:worker/replica:0/task:k/...); collectives span them all. The constructor
/// joins the cluster the resolver describes: it returns once every worker
/// has joined and the ring between them is connected (or throws
/// timeout_error after `join_timeout`, value_error for a worker whose
/// configuration differs, authentication_error for a wrong token). With
/// one worker (no cluster configured, or an evaluator) it is a
/// mirrored_strategy over the local devices.
///
/// As in TF, a merge function runs once on each worker over that worker's
/// replicas, and the reductions inside it span the cluster; every worker
/// must make the same collective calls in the same order. Distributed
/// variables take their initial value from the chief. A lost worker makes
/// every survivor's pending and next collective raise peer_lost_error.
class multi_worker_mirrored_strategy : public strategy {
public:
  explicit multi_worker_mirrored_strategy(const cluster_resolver& resolver = cluster_resolver{},
                                          multi_worker_options options = {});

  /// The cluster this worker belongs to.
  const cluster_spec& cluster() const noexcept;

  /// TF's is_chief: the chief (rank 0 when there is none) or an evaluator.
  bool is_chief() const noexcept;

private:
  std::shared_ptr<const cluster_spec> cluster_;
};

} // namespace lockstep

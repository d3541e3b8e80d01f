#pragma once

#include "lockstep/cluster_resolver.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/strategy.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lockstep {

/// A setting that every worker of a job must share, by name and value as
/// text: {"--lr", "0.05"}. See multi_worker_options::agreed_settings.
struct agreed_setting {
  std::string name;
  std::string value;
};

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
  /// Settings every worker must share: declare each that changes the
  /// numbers a job computes (a learning rate, a seed, the epochs). Once
  /// every worker has joined, the coordinator compares them; when any
  /// differs, the constructor throws value_error on every worker, naming
  /// each setting that differs and which workers hold which value. lockstep
  /// adds its own version, the replicas per worker and whose collectives
  /// run between the workers ("lockstep version", "replicas per worker",
  /// "collectives between workers", names a program may not use). At most 64
  /// settings, names of 1 to 128 bytes, each once, values of at most 1024
  /// bytes.
  std::vector<agreed_setting> agreed_settings;
  /// What carries the collectives between the workers: "auto" (shared
  /// memory when every worker shares this host's memory, probed at the
  /// start; the TCP ring otherwise) or "tcp" (the ring, always: to compare
  /// or to test it). Unset: LOCKSTEP_TRANSPORT, else "auto". value_error
  /// for another value. When any worker asks for "tcp", all use the ring.
  std::optional<std::string> transport;
  /// Whose collectives run between the workers: "lockstep" (its own:
  /// shared memory or the TCP ring, as `transport` says) or "mpi" (MPI's,
  /// for the fabrics MPI reaches; the workers must be one MPI job, as
  /// mpirun starts them, and lockstep built with MPI: docs/multi_worker.md,
  /// "Collectives over MPI"). The rendezvous, heartbeats, failure handling
  /// and agreed settings stay lockstep's. Unset: LOCKSTEP_COMMUNICATOR,
  /// else "lockstep". value_error for another value; every worker must
  /// choose the same (an agreed setting).
  std::optional<std::string> communicator;
};

/// Ends every join of a multi-worker strategy in progress, and every later
/// one, at once: the constructor throws cancelled_error on this worker (the
/// coordinator passes the error on to the workers that joined it). Safe to
/// call from a signal handler (an atomic store and a write(2)): a Ctrl-C
/// handler calls it so that an interrupt does not wait out the join
/// timeout. For a program that is stopping; there is no undo.
void cancel_joins() noexcept;

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

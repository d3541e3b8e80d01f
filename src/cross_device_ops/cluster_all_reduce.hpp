#pragma once

// cluster_all_reduce: the cross_device_ops of multi_worker_mirrored_strategy
// (TF's CollectiveAllReduce). Each worker holds the components of its own
// replicas; a reduction spans every worker:
//
//   cross-replica (strategy.reduce, reduce_to, batch_reduce_to, merge
//   functions): the calling thread combines this worker's components in
//   replica order on the first destination device, the workers' partial
//   results meet in one collective between workers (`workers`, one rank
//   per process: the TCP ring), MEAN divides once by the cluster's replica
//   count, and the result is copied to the destinations;
//
//   replica context (replica_context::all_reduce): a hierarchical
//   communicator, the replicas' shared-memory group inside each worker and
//   `workers` between them (collectives/hierarchical_communicator.hpp).
//
// Every call is a collective: every worker must make the same calls in the
// same order (as in TF), or the workers' fingerprints differ and each gets
// an error naming what the others issued. Broadcasts stay local (TF's
// CollectiveAllReduce broadcasts by copies too).

#include "collectives/communicator.hpp"
#include "cross_device_ops/replica_collectives.hpp"

#include "lockstep/cross_device_ops.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace lockstep::detail {

class cluster_all_reduce final : public cross_device_ops {
public:
  /// `workers`: this process's rank `worker_index` of the collective
  /// between workers; `timeout`: each collective's deadline;
  /// `workers_on_host`: the worker processes on this host, this one
  /// included, whose replicas share its CPUs (their waits spin only while
  /// every host's replica has a CPU).
  cluster_all_reduce(std::shared_ptr<communicator> workers, std::size_t worker_index,
                     std::chrono::milliseconds timeout, std::size_t workers_on_host = 1);

  std::string name() const override;

protected:
  mirrored<tensor> reduce_implementation(reduce_op op, const per_replica<tensor>& value,
                                         const destinations& destination) override;
  std::vector<mirrored<tensor>>
  batch_reduce_implementation(reduce_op op, const std::vector<reduce_pair>& pairs) override;
  std::size_t num_between_graph_workers() const override { return workers_->size(); }

private:
  detail::replica_collectives replica_collectives(const std::vector<device_spec>& devices,
                                          const std::string& name) const override;

  std::shared_ptr<communicator> workers_;
  std::size_t worker_index_;
  std::chrono::milliseconds timeout_;
  std::size_t workers_on_host_;
};

} // namespace lockstep::detail

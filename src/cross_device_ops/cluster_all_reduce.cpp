#include "cross_device_ops/cluster_all_reduce.hpp"

#include "collectives/hierarchical_communicator.hpp"
#include "collectives/reduce_kernels.hpp"
#include "communicators/shm_communicator.hpp"

namespace lockstep::detail {

cluster_all_reduce::cluster_all_reduce(std::shared_ptr<communicator> workers,
                                       std::size_t worker_index, std::chrono::milliseconds timeout,
                                       std::size_t workers_on_host)
  : workers_(std::move(workers)),
    worker_index_(worker_index),
    timeout_(timeout),
    workers_on_host_(workers_on_host) {}

std::string cluster_all_reduce::name() const {
  return "cluster_all_reduce";
}

lockstep::detail::replica_collectives
cluster_all_reduce::replica_collectives(const std::vector<device_spec>& devices,
                                        const std::string& name) const {
  // The local replicas wait for their leader while it runs the ring, and
  // the other workers on this host have replicas of their own: spinning
  // on a CPU that another worker's leader needs would slow both.
  auto local = std::make_shared<shm_communicator>(devices.size(), name, "replica",
                                                  devices.size() * workers_on_host_);
  collective_options defaults;
  defaults.timeout = timeout_;
  defaults.tag = name;
  return {std::make_shared<hierarchical_communicator>(std::move(local), workers_, worker_index_),
          defaults};
}

mirrored<tensor> cluster_all_reduce::reduce_implementation(reduce_op op,
                                                           const per_replica<tensor>& value,
                                                           const destinations& destination) {
  return std::move(batch_reduce_implementation(op, {{value, destination}}).at(0));
}

std::vector<mirrored<tensor>>
cluster_all_reduce::batch_reduce_implementation(reduce_op op,
                                                const std::vector<reduce_pair>& pairs) {
  // This worker's part of each pair, combined in replica order (MEAN as a
  // sum, halves in float32), on the pair's first destination device.
  std::vector<tensor> partial;
  partial.reserve(pairs.size());
  for (const auto& p : pairs) {
    auto total = start_reduction(p.value.primary(), p.destination.devices().at(0));
    for (std::size_t r = 1; r < p.value.size(); ++r)
      combine_into(op, total, p.value[r]);
    partial.push_back(std::move(total));
  }
  collective_options options;
  options.timeout = timeout_;
  options.tag = "cluster_all_reduce";
  const auto across = op == reduce_op::mean ? reduce_op::sum : op;
  std::vector<tensor> totals;
  totals.reserve(partial.size());
  for (const auto& t : partial)
    totals.push_back(tensor::uninitialized(t.dtype(), t.shape(), t.device()));
  workers_->all_reduce(worker_index_, across, partial, totals, options);
  std::vector<mirrored<tensor>> results;
  results.reserve(pairs.size());
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const auto& value = pairs[k].value;
    // Every worker holds as many components (one per local replica).
    finish_reduction(op, totals[k], value.size() * workers_->size(), value.primary().dtype());
    std::vector<tensor> copies;
    for (const auto& d : pairs[k].destination.devices())
      copies.push_back(copies.empty() && d == totals[k].device() ? totals[k] : totals[k].to(d));
    results.emplace_back(std::move(copies));
  }
  return results;
}

} // namespace lockstep::detail

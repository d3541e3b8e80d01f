// pod_strategy: checks the pod and its device assignment, then starts this
// host's replicas, one replica actor each on the device of its logical
// core 0 (its other logical cores run parts of it on their device
// executors, strategies/logical_devices.cpp), as mirrored_strategy does
// (strategies/mirrored_devices.hpp), with the pod's rules in the shared
// state (detail::pod_rules). A pod of several hosts is a cluster of worker
// processes, one per host, each started as a worker of the multi-worker
// strategy (strategies/cluster_worker.hpp).

#include "lockstep/pod_strategy.hpp"

#include "pod/mesh_text.hpp"
#include "strategies/cluster_worker.hpp"
#include "strategies/mirrored_devices.hpp"
#include "strategies/public_state.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

namespace lockstep {

namespace {

/// Refuses a topology of several tasks without a cluster: each task is a
/// worker process, which the resolver's constructor joins.
void check_one_task(const pod_topology& topology, const char* what) {
  const auto tasks = topology.num_tasks();
  if (tasks > 1)
    throw value_error(std::string{"pod_strategy: "} + what + " of " + std::to_string(tasks)
                      + " tasks (hosts) runs one worker process per host: make the strategy "
                        "from the cluster's cluster_resolver (docs/pod.md)");
}

/// `given`, or TF's TPUStrategy default: one replica of one logical core
/// per device of the pod.
device_assignment assignment_on(const pod_topology& topology,
                                std::optional<device_assignment> given,
                                const std::string& whose_topology) {
  if (!given) {
    const mesh_coordinates ones(topology.mesh_rank(), 1);
    return device_assignment::build(topology, ones, ones, topology.num_devices());
  }
  if (given->topology() != topology)
    throw value_error("pod_strategy: the device_assignment is on another topology than "
                      + whose_topology + ": mesh " + detail::mesh_text(topology.mesh_shape())
                      + " of " + std::to_string(topology.num_tasks()) + " tasks x "
                      + std::to_string(topology.num_devices_per_task())
                      + " devices, where the assignment's is mesh "
                      + detail::mesh_text(given->topology().mesh_shape()) + " of "
                      + std::to_string(given->topology().num_tasks()) + " tasks x "
                      + std::to_string(given->topology().num_devices_per_task()) + " devices");
  return std::move(*given);
}

device_assignment topology_assignment(const pod_topology& topology,
                                      std::optional<device_assignment> given) {
  check_one_task(topology, "a topology");
  if (given)
    check_one_task(given->topology(), "a device assignment");
  return assignment_on(topology, std::move(given), "the strategy's");
}

/// The pod of the cluster: every worker a host with this worker's devices.
device_assignment cluster_assignment(const cluster_spec& cluster,
                                     std::optional<device_assignment> given,
                                     const pod_options& options) {
  const auto topology
    = pod_topology::from_cluster(cluster, detail::local_worker_devices(options.cluster));
  return assignment_on(topology, std::move(given), "the cluster's pod");
}

std::size_t task_of(const device_assignment& assignment, std::size_t replica,
                    std::size_t logical_core) {
  return assignment.topology().task_ordinal_at_coordinates(
    assignment.coordinates(replica, logical_core));
}

/// The replicas `task` runs, after checking that the workers can run the
/// assignment: each replica on one host (its parts pass tensors inside a
/// process), and every host the same number of consecutive replicas, so a
/// replica's id is the multi-worker strategy's host · per host + local.
std::vector<std::size_t> replicas_of_task(const device_assignment& assignment,
                                          std::size_t task) {
  const auto& topology = assignment.topology();
  const auto replicas = assignment.num_replicas();
  for (std::size_t r = 0; r < replicas; ++r)
    for (std::size_t k = 1; k < assignment.num_cores_per_replica(); ++k)
      if (task_of(assignment, r, k) != task_of(assignment, r, 0))
        throw value_error(
          "pod_strategy: replica " + std::to_string(r) + " has logical core 0 on task "
          + std::to_string(task_of(assignment, r, 0)) + " and logical core "
          + std::to_string(k) + " on task " + std::to_string(task_of(assignment, r, k))
          + "; a replica's logical cores must be on one host (its worker process)");
  const auto tasks = topology.num_tasks();
  const std::string rule = "across processes each task (host) runs as many replicas as the "
                           "others, consecutive in replica order (task t runs replicas "
                           "t*m .. t*m + m - 1)";
  if (replicas % tasks != 0)
    throw value_error("pod_strategy: " + std::to_string(replicas)
                      + " replicas cannot be shared evenly by the " + std::to_string(tasks)
                      + " tasks (hosts) of the pod; " + rule);
  const auto per_task = replicas / tasks;
  for (std::size_t r = 0; r < replicas; ++r)
    if (task_of(assignment, r, 0) != r / per_task)
      throw value_error("pod_strategy: replica " + std::to_string(r) + " runs on task "
                        + std::to_string(task_of(assignment, r, 0)) + ", not task "
                        + std::to_string(r / per_task) + " (m = " + std::to_string(per_task)
                        + "); " + rule);
  std::vector<std::size_t> out;
  for (std::size_t r = task * per_task; r < (task + 1) * per_task; ++r)
    out.push_back(r);
  return out;
}

std::shared_ptr<detail::strategy_state> make_state(const cluster_spec& cluster,
                                                   const device_assignment& assignment,
                                                   const pod_options& options) {
  if (options.steps_per_run == 0)
    throw value_error("pod_strategy: steps_per_run must be at least 1, got 0");
  const bool alone = cluster.world_size <= 1 || cluster.is_evaluator();
  const auto task = alone ? 0 : cluster.rank;
  const auto replicas = replicas_of_task(assignment, task);
  return detail::named_after_task(cluster, [&] {
    std::vector<device_spec> devices;
    std::vector<std::vector<device_spec>> logical_cores;
    for (const auto r : replicas) {
      devices.push_back(assignment.device(r, 0));
      logical_cores.emplace_back();
      for (std::size_t k = 0; k < assignment.num_cores_per_replica(); ++k)
        logical_cores.back().push_back(assignment.device(r, k).canonical());
    }
    devices = detail::mirrored_devices(std::move(devices));
    auto name = "pod_strategy("
                + (alone ? std::string{}
                         : "host " + std::to_string(task) + " of "
                             + std::to_string(cluster.world_size) + ": ")
                + detail::joined_device_names(devices) + ")";
    detail::pod_rules rules{.host_device = assignment.host_device(replicas.front(), 0).canonical(),
                            .steps_per_run = options.steps_per_run,
                            .logical_cores = std::move(logical_cores)};
    return detail::start_worker(cluster, std::move(devices), options.cluster, std::move(name),
                                [&](detail::strategy_state& state) { state.pod = rules; });
  });
}

} // namespace

pod_strategy::pod_strategy(pod_topology topology,
                           std::optional<lockstep::device_assignment> assignment,
                           pod_options options)
  : pod_strategy(std::make_shared<const cluster_spec>(),
                 std::make_shared<const lockstep::device_assignment>(
                   topology_assignment(topology, std::move(assignment))),
                 options) {}

pod_strategy::pod_strategy(const cluster_resolver& resolver,
                           std::optional<lockstep::device_assignment> assignment,
                           pod_options options)
  : pod_strategy(std::make_shared<const cluster_spec>(resolver.spec()),
                 std::make_shared<const lockstep::device_assignment>(
                   cluster_assignment(resolver.spec(), std::move(assignment), options)),
                 options) {}

pod_strategy::pod_strategy(std::shared_ptr<const cluster_spec> cluster,
                           std::shared_ptr<const lockstep::device_assignment> assignment,
                           const pod_options& options)
  : strategy(make_state(*cluster, *assignment, options)),
    cluster_(std::move(cluster)),
    assignment_(std::move(assignment)) {}

std::size_t pod_strategy::num_hosts() const {
  std::set<device_spec> hosts;
  for (std::size_t r = 0; r < assignment_->num_replicas(); ++r)
    hosts.insert(assignment_->host_device(r, 0));
  return hosts.size();
}

std::size_t pod_strategy::num_replicas_per_host() const noexcept {
  const auto per_host = assignment_->topology().num_devices_per_task()
                        / assignment_->num_cores_per_replica();
  return std::min(assignment_->num_replicas(), per_host);
}

std::size_t pod_strategy::steps_per_run() const noexcept {
  return extended().steps_per_run();
}

} // namespace lockstep

// Where a pod's topology comes from when the program does not spell it
// out: this process's devices (one host), a multi-worker cluster (every
// worker a host), and initialize_pod_system (TF's initialize_tpu_system).
//
// A host of N devices is laid out as a TPU host is: chips of 2 cores when
// N is even (TPU v2 and v3 chips have 2), of 1 when it is odd, the chips in
// the most nearly square x by y grid with x >= y, so 8 devices are TF's
// v3-8 mesh [2, 2, 1, 2] with TF's device order (the core fastest, then x,
// then y). A cluster's hosts are stacked along z, the axis that TF's
// replica grid fills last, so consecutive replicas share a host as long as
// they can.

#include "lockstep/pod_topology.hpp"

#include "cluster_resolver/task_names.hpp"

#include "lockstep/error.hpp"
#include "lockstep/gpu.hpp"

#include <string>
#include <utility>

namespace lockstep {

namespace {

/// A host's chips and cores: [x, y, 1, cores].
struct host_mesh {
  int x = 1;
  int y = 1;
  int cores = 1;

  /// The coordinates of the host's device `ordinal`, the host at height `z`.
  mesh_coordinates place(std::size_t ordinal, int z) const {
    const auto cores_per_chip = static_cast<std::size_t>(cores);
    const auto chip = ordinal / cores_per_chip;
    return {static_cast<int>(chip % static_cast<std::size_t>(x)),
            static_cast<int>(chip / static_cast<std::size_t>(x)), z,
            static_cast<int>(ordinal % cores_per_chip)};
  }
};

host_mesh host_mesh_of(std::size_t devices) {
  const std::size_t cores = devices % 2 == 0 ? 2 : 1;
  const auto chips = devices / cores;
  std::size_t y = 1;
  for (std::size_t d = 1; d * d <= chips; ++d)
    if (chips % d == 0)
      y = d;
  return {static_cast<int>(chips / y), static_cast<int>(y), static_cast<int>(cores)};
}

/// `devices`, canonical, after checking that there are some, at most a
/// mesh's worth, and that all are this process's.
std::vector<device_spec> checked_local(const std::vector<device_spec>& devices,
                                       const std::string& caller) {
  if (devices.empty())
    throw value_error(caller + ": no devices");
  if (devices.size() > max_pod_mesh_size)
    throw value_error(caller + ": " + std::to_string(devices.size())
                      + " devices are more than a pod's mesh may hold (max_pod_mesh_size, "
                      + std::to_string(max_pod_mesh_size) + ")");
  std::vector<device_spec> result;
  for (const auto& d : devices) {
    if (!d.is_local())
      throw value_error(caller + ": the devices must be this process's ("
                        + cpu_device(0).to_string() + " and its like), not " + d.to_string());
    result.push_back(d.canonical());
  }
  return result;
}

} // namespace

pod_topology pod_topology::from_devices(const std::vector<device_spec>& devices) {
  auto names = checked_local(devices, "pod_topology::from_devices");
  const auto host = host_mesh_of(names.size());
  coordinate_table coordinates(1);
  for (std::size_t d = 0; d < names.size(); ++d)
    coordinates[0].push_back(host.place(d, 0));
  return pod_topology({host.x, host.y, 1, host.cores}, std::move(coordinates), {std::move(names)});
}

pod_topology pod_topology::from_cluster(const cluster_spec& cluster,
                                        const std::vector<device_spec>& local_devices) {
  if (cluster.world_size <= 1 || cluster.is_evaluator())
    return from_devices(local_devices);
  const auto local = checked_local(local_devices, "pod_topology::from_cluster");
  const auto per_host = local.size();
  if (cluster.world_size > max_pod_mesh_size / per_host)
    throw value_error("pod_topology::from_cluster: " + std::to_string(cluster.world_size)
                      + " hosts of " + std::to_string(per_host)
                      + " devices are more than a pod's mesh may hold (max_pod_mesh_size, "
                      + std::to_string(max_pod_mesh_size) + ")");
  const auto host = host_mesh_of(per_host);
  coordinate_table coordinates(cluster.world_size);
  std::vector<std::vector<device_spec>> names(cluster.world_size);
  for (std::size_t task = 0; task < cluster.world_size; ++task) {
    const auto name = detail::task_name_of(cluster, task);
    const auto prefix = "/job:" + name.job + "/replica:0/task:" + std::to_string(name.task)
                        + "/device:";
    for (std::size_t d = 0; d < per_host; ++d) {
      coordinates[task].push_back(host.place(d, static_cast<int>(task)));
      names[task].push_back(device_spec::parse(prefix + local[d].device_type().value_or("CPU")
                                               + ":"
                                               + std::to_string(local[d].device_index().value_or(0))));
    }
  }
  return pod_topology({host.x, host.y, static_cast<int>(cluster.world_size), host.cores},
                      std::move(coordinates), std::move(names));
}

pod_system_metadata initialize_pod_system(const cluster_resolver& resolver,
                                          std::vector<device_spec> local_devices) {
  if (local_devices.empty()) {
    const int gpus = gpu_count();
    for (int i = 0; i < gpus; ++i)
      local_devices.push_back(device_spec::parse("/device:GPU:" + std::to_string(i)));
    if (gpus == 0)
      local_devices.push_back(device_spec::parse("/cpu:0"));
  }
  const auto& cluster = resolver.spec();
  auto topology = pod_topology::from_cluster(cluster, local_devices);
  const bool alone = cluster.world_size <= 1 || cluster.is_evaluator();
  std::vector<device_spec> devices;
  for (const auto& host : topology.devices())
    devices.insert(devices.end(), host.begin(), host.end());
  return pod_system_metadata{.num_hosts = topology.num_tasks(),
                             .num_devices_per_host = topology.num_devices_per_task(),
                             .num_cores = topology.num_devices(),
                             .host = alone ? 0 : cluster.rank,
                             .topology = std::move(topology),
                             .devices = std::move(devices)};
}

} // namespace lockstep

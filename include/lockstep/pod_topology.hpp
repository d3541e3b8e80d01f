#pragma once

// A pod's topology (TF's tf.tpu.experimental.Topology): a mesh of device
// coordinates, and which task (host) and which device of that task sits at
// each coordinate. A mesh has rank 4 as TF's has (x, y, z, the core on its
// chip) unless the program gives another rank; coordinates that hold no
// device are the pod's missing devices. The device assignment
// (lockstep/device_assignment.hpp) places each replica's logical cores on
// this mesh. docs/pod.md describes both.

#include "lockstep/cluster_resolver.hpp"
#include "lockstep/device_spec.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep {

/// A point of a pod's mesh, one entry per mesh axis (x, y, z, core for a
/// rank-4 mesh). Also a mesh's shape and a computation's shape or stride.
using mesh_coordinates = std::vector<int>;

/// Coordinates by two indices: a topology's device coordinates
/// [task][device][axis], or a device assignment's core assignment
/// [replica][logical core][axis].
using coordinate_table = std::vector<std::vector<mesh_coordinates>>;

/// The most coordinates a pod's mesh may have (the product of its shape):
/// 4,194,304, e.g. 65,536 hosts of 64 devices. The topology keeps a task
/// and a device ordinal per coordinate.
inline constexpr std::size_t max_pod_mesh_size = std::size_t{1} << 22;

/// Which devices form a pod and where each sits in the mesh. Tasks are
/// numbered 0 .. num_tasks() - 1 (a multi-worker cluster's ranks), and the
/// devices of a task 0 .. num_devices_per_task() - 1 (TF's TPU ordinals);
/// every task has the same number of devices. An immutable value.
class pod_topology {
public:
  // -- construction -----------------------------------------------------------

  /// A topology given explicitly: `mesh_shape` (rank 1 or more, every entry
  /// positive, at most max_pod_mesh_size coordinates) and the coordinates
  /// of each task's devices, [task][device][axis]. The devices are named
  /// after their tasks: with one task this process's CPU devices
  /// (`cpu_device(d)`), with several /job:worker/replica:0/task:<t>/device:CPU:<d>.
  /// Throws value_error, naming the task and device, for a mesh shape that
  /// is empty, not positive or too large, for device coordinates that are
  /// not a rank-3 table with a minor dimension of the mesh's rank (no
  /// devices, tasks with different numbers of devices, coordinates of the
  /// wrong length), for coordinates outside the mesh, and for two devices
  /// at the same coordinates.
  pod_topology(mesh_coordinates mesh_shape, coordinate_table device_coordinates);

  /// As above, and names every device: `devices[task][device]`, the same
  /// shape as `device_coordinates`. Names are canonicalised
  /// (device_spec::canonical); each task's devices must share one host
  /// (job, replica and task), and different tasks different hosts. Throws
  /// value_error, besides the errors above, for a table of names of
  /// another shape, a name given twice, or hosts shared or split.
  pod_topology(mesh_coordinates mesh_shape, coordinate_table device_coordinates,
               std::vector<std::vector<device_spec>> devices);

  /// One task (this process) holding `devices`, in that order (ordinal d is
  /// devices[d]): `cpu_devices(N)`, `gpu_devices(K)` or any distinct local
  /// devices. The mesh is the host mesh of N devices: [x, y, 1, c] with c = 2
  /// cores per chip when N is even and 1 when it is odd, and the N / c chips
  /// in the most nearly square x by y grid with x >= y; device d is core
  /// d % c of chip d / c, chips numbered along x first. So 8 devices form
  /// TF's TPU v3-8 mesh [2, 2, 1, 2], 4 devices [2, 1, 1, 2], 2 devices
  /// [1, 1, 1, 2], 3 devices [3, 1, 1, 1]. Throws value_error for no
  /// devices, a device of another task, or a device given twice
  /// (after canonicalisation).
  static pod_topology from_devices(const std::vector<device_spec>& devices);

  /// Every worker of `cluster` is a task (by rank) with the same devices
  /// as `local_devices` (this worker's, checked as from_devices checks
  /// them): the pod of world_size hosts, each the host mesh of
  /// from_devices, stacked along z (task t at z = t), so [x, y, world_size,
  /// c]. Task t's devices are named after its task as the multi-worker
  /// strategy names them: /job:worker/replica:0/task:<rank>, or from
  /// TF_CONFIG with a chief, /job:chief/replica:0/task:0 for rank 0 and
  /// /job:worker/replica:0/task:<rank - 1> for the others; each keeps its
  /// local device's type and index. One process (world size 1) or an
  /// evaluator is from_devices(local_devices).
  static pod_topology from_cluster(const cluster_spec& cluster,
                                   const std::vector<device_spec>& local_devices);

  // -- the mesh (TF's Topology properties) -----------------------------------

  /// The mesh's size along each axis.
  const mesh_coordinates& mesh_shape() const noexcept { return mesh_shape_; }

  /// The mesh's number of axes.
  std::size_t mesh_rank() const noexcept { return mesh_shape_.size(); }

  /// The coordinates of every device, [task][device][axis].
  const coordinate_table& device_coordinates() const noexcept { return device_coordinates_; }

  /// The coordinates of device `device` of task `task`; value_error when
  /// either is out of range.
  const mesh_coordinates& device_coordinates(std::size_t task, std::size_t device) const;

  /// The coordinates that hold no device, in row-major order (the last
  /// axis fastest), as TF's argwhere gives them. Made on each call.
  std::vector<mesh_coordinates> missing_devices() const;

  /// How many coordinates hold no device.
  std::size_t num_missing_devices() const noexcept { return tasks_at_.size() - num_devices(); }

  /// Tasks (hosts) in the pod.
  std::size_t num_tasks() const noexcept { return device_coordinates_.size(); }

  /// Devices of each task (TF's num_tpus_per_task).
  std::size_t num_devices_per_task() const noexcept { return device_coordinates_.front().size(); }

  /// Devices in the pod: num_tasks() · num_devices_per_task().
  std::size_t num_devices() const noexcept { return num_tasks() * num_devices_per_task(); }

  // -- who is where ------------------------------------------------------------

  /// True when `coordinates` lie in the mesh and hold a device.
  bool has_device_at(const mesh_coordinates& coordinates) const noexcept;

  /// The task of the device at `coordinates`. Throws value_error for
  /// coordinates of another rank, outside the mesh, or of a missing device.
  std::size_t task_ordinal_at_coordinates(const mesh_coordinates& coordinates) const;

  /// The ordinal, within its task, of the device at `coordinates` (TF's
  /// tpu_device_ordinal_at_coordinates); errors as above.
  std::size_t device_ordinal_at_coordinates(const mesh_coordinates& coordinates) const;

  /// The device at `coordinates` (TF's tpu_device_name_at_coordinates);
  /// errors as above.
  const device_spec& device_at_coordinates(const mesh_coordinates& coordinates) const;

  /// The host CPU of the task at `coordinates` (TF's
  /// cpu_device_name_at_coordinates): its /job:.../task:<t>/device:CPU:0.
  device_spec host_device_at_coordinates(const mesh_coordinates& coordinates) const;

  /// Device `ordinal` of task `task`; value_error when either is out of range.
  const device_spec& device(std::size_t task, std::size_t ordinal) const;

  /// The host CPU of task `task`, /job:.../replica:0/task:<t>/device:CPU:0;
  /// value_error when it is out of range.
  device_spec host_device(std::size_t task) const;

  /// Every device, [task][device].
  const std::vector<std::vector<device_spec>>& devices() const noexcept { return devices_; }

  friend bool operator==(const pod_topology&, const pod_topology&) = default;

private:
  /// Checks the mesh shape and the device coordinates (the constructors'
  /// errors) and fills the per-coordinate maps.
  void index_devices();

  /// The row-major index of `coordinates`; throws value_error for
  /// coordinates of another rank or outside the mesh.
  std::size_t index_of(const mesh_coordinates& coordinates) const;

  /// index_of, and throws value_error when no device is there.
  std::size_t device_index_of(const mesh_coordinates& coordinates) const;

  mesh_coordinates mesh_shape_;
  coordinate_table device_coordinates_;
  std::vector<std::vector<device_spec>> devices_;
  // Per mesh coordinate (row-major): the task and the device ordinal
  // there, -1 where the device is missing (TF's inverted topology).
  std::vector<int> tasks_at_;
  std::vector<int> ordinals_at_;
};

/// What `initialize_pod_system` learns about the pod (TF's
/// TPUSystemMetadata).
struct pod_system_metadata {
  /// Hosts (tasks) in the pod: the cluster's workers.
  std::size_t num_hosts = 0;
  /// Devices on each host (TF's num_of_cores_per_host).
  std::size_t num_devices_per_host = 0;
  /// Devices in the pod: num_hosts · num_devices_per_host (TF's num_cores).
  std::size_t num_cores = 0;
  /// This process's host (its rank; 0 for one process or an evaluator).
  std::size_t host = 0;
  /// The pod's topology: pod_topology::from_cluster.
  pod_topology topology;
  /// Every device of the pod, host by host.
  std::vector<device_spec> devices;
};

/// TF's initialize_tpu_system: the pod of the cluster `resolver` describes,
/// each of its workers a host with `local_devices` (empty: this process's
/// logical GPUs when it has any, else one CPU device, as
/// mirrored_strategy's default). Starts nothing and connects to nobody:
/// every worker computes the same topology from its own resolver. Throws
/// value_error as pod_topology::from_cluster does.
pod_system_metadata initialize_pod_system(const cluster_resolver& resolver,
                                          std::vector<device_spec> local_devices = {});

} // namespace lockstep

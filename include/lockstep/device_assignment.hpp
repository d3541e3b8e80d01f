#pragma once

// Where each replica's logical cores run (TF's
// tf.tpu.experimental.DeviceAssignment): a core assignment
// [replica][logical core][axis] of coordinates in a pod_topology's mesh.
// A replica of one logical core is data parallelism alone; several logical
// cores per replica split a model across devices (model parallelism inside
// a replica). `build` computes TF's assignment from a computation's shape;
// docs/pod.md walks through it.

#include "lockstep/device_spec.hpp"
#include "lockstep/pod_topology.hpp"

#include <cstddef>
#include <vector>

namespace lockstep {

/// TF's tf.tpu.experimental.DeviceOrderMode: whether device_assignment::build
/// lays the replicas, and the logical cores of each, along TF's rings or
/// on the plain grid (docs/pod.md). TF's AUTO, RING and MESH, with their
/// values; `automatic` stands for AUTO, since `auto` is a C++ keyword.
enum class device_order_mode {
  /// TF's AUTO (0): the rings where TF's rule allows them (a rank-4 mesh,
  /// computation_shape[3] == mesh_shape[3], no stride, the replicas fill
  /// the mesh), the grid otherwise.
  automatic = 0,
  /// TF's RING (1): the rings; an error where TF's rule does not allow them.
  ring = 1,
  /// TF's MESH (2): the grid, even where the rings would apply.
  mesh = 2,
};

/// TF's SINGLE_CORE_ASSIGNMENT: one replica of one logical core, at the
/// origin of a mesh of rank `mesh_rank` ([[[0, 0, 0, 0]]] for rank 4).
coordinate_table single_core_assignment(std::size_t mesh_rank = 4);

/// The devices of each (replica, logical core) of a computation on a pod.
/// Replicas are numbered 0 .. num_replicas() - 1, the logical cores of each
/// 0 .. num_cores_per_replica() - 1. An immutable value.
class device_assignment {
public:
  // -- construction -----------------------------------------------------------

  /// TF's DeviceAssignment(topology, core_assignment): `core_assignment`
  /// is [num_replicas][num_cores_per_replica][mesh_rank]. Throws
  /// value_error with TF's texts for a table that is not rank 3 ("core_assignment
  /// must be a rank 3 array, got shape [2]"; a ragged table names the
  /// replica or core that differs) or whose minor dimension is not the
  /// topology's rank; and, where TF would index out of its arrays or
  /// accept a clash, for coordinates outside the mesh, of a missing
  /// device, or shared by two (replica, logical core) pairs.
  device_assignment(pod_topology topology, coordinate_table core_assignment);

  /// TF's DeviceAssignment.build (device_assignment.device_assignment):
  /// `num_replicas` replicas of a computation that occupies
  /// `computation_shape` devices of the mesh, `computation_stride` apart
  /// along each axis (empty: all ones, of the mesh's rank). Follows TF's
  /// algorithm (docs/pod.md): the footprint shape·stride must fit the mesh;
  /// at most ∏ (mesh / footprint)·stride replicas fit; replicas lie on the
  /// most nearly cubic grid (the smallest axis first, the core axis before
  /// the others), at offsets outer·footprint + inner; on a rank-4 mesh
  /// where the computation spans a chip's cores (computation_shape[-1] ==
  /// mesh_shape[-1]) without stride and the replicas fill the mesh, they
  /// follow TF's ring instead; on a pod with missing devices, replica r's
  /// logical cores are the devices r·k .. r·k + k - 1 in task order (k =
  /// ∏ computation_shape). `order` (TF's device_order_mode) picks between
  /// the rings and the grid: `automatic` as above, `mesh` always the grid,
  /// `ring` always the rings, where they apply; a pod with missing devices
  /// takes the task order whatever `order` says, as in TF. Throws
  /// value_error with TF's texts, "pod" for "TPU":
  /// "computation_shape must have shape [4]; got [3]",
  /// "computation_stride must be positive; got computation_stride=[0, 1, 1, 1]",
  /// "computation footprint [4, 1, 1, 1] does not fit in pod topology shape
  /// [2, 2, 1, 2]", "requested 5 replicas but only 4 replicas with shape
  /// [1, 1, 1, 2] and computation_stride [1, 1, 1, 1] fit in a pod mesh of
  /// shape [2, 2, 1, 2]"; "device_order_mode=device_order_mode::ring is
  /// not compatible with the 3D tiling current topology.  Try setting
  /// device_order_mode=device_order_mode::automatic" where the rings do
  /// not apply; with missing devices, for a stride other than ones, or
  /// more cores than the pod has devices (TF's assertions); for an `order`
  /// that is none of the three (which TF would take as MESH).
  static device_assignment build(const pod_topology& topology,
                                 mesh_coordinates computation_shape = {},
                                 mesh_coordinates computation_stride = {},
                                 std::size_t num_replicas = 1,
                                 device_order_mode order = device_order_mode::automatic);

  // -- properties ---------------------------------------------------------------

  /// The pod's topology.
  const pod_topology& topology() const noexcept { return topology_; }

  /// [replica][logical core][axis]: the coordinates of each logical core.
  const coordinate_table& core_assignment() const noexcept { return core_assignment_; }

  /// Replicas of the computation.
  std::size_t num_replicas() const noexcept { return core_assignment_.size(); }

  /// Logical cores of each replica.
  std::size_t num_cores_per_replica() const noexcept { return num_cores_per_replica_; }

  // -- where a logical core runs ----------------------------------------------

  /// The mesh coordinates of `logical_core` of `replica`. Throws
  /// value_error when either is out of range.
  const mesh_coordinates& coordinates(std::size_t replica, std::size_t logical_core) const;

  /// The ordinal, within its task, of the device of `logical_core` of
  /// `replica` (TF's tpu_ordinal).
  std::size_t device_ordinal(std::size_t replica = 0, std::size_t logical_core = 0) const;

  /// The host CPU of the task that runs `logical_core` of `replica`.
  device_spec host_device(std::size_t replica = 0, std::size_t logical_core = 0) const;

  /// The device of `logical_core` of `replica` (TF's tpu_device).
  const device_spec& device(std::size_t replica = 0, std::size_t logical_core = 0) const;

  /// The replicas, ascending, whose `logical_core` runs on task `task`.
  /// Throws value_error with TF's text when there is none ("Can not find
  /// any replica in task: 3 contains logical_core: 0 ").
  const std::vector<std::size_t>& lookup_replicas(std::size_t task,
                                                  std::size_t logical_core) const;

  friend bool operator==(const device_assignment&, const device_assignment&) = default;

private:
  /// `core_assignment`, already checked for its shape, with
  /// `num_cores_per_replica` cores per replica (which an empty table
  /// cannot tell: build of 0 replicas).
  device_assignment(pod_topology topology, coordinate_table core_assignment,
                    std::size_t num_cores_per_replica);

  pod_topology topology_;
  coordinate_table core_assignment_;
  std::size_t num_cores_per_replica_ = 0;
  // [task][logical core]: the replicas there, ascending; empty: none.
  std::vector<std::vector<std::vector<std::size_t>>> replicas_by_task_;
};

} // namespace lockstep

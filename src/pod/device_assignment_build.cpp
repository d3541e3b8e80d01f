// device_assignment::build: TF's device_assignment() (tpu/device_assignment.py),
// step by step, with its errors ("pod" where TF says "TPU").
//
// How it works, for a mesh of rank r:
//  1. footprint = computation_shape · computation_stride must fit the mesh
//     along every axis; (mesh / footprint) · stride replicas fit along each
//     axis (replica_counts), and their product is the most replicas.
//  2. With no missing devices, the replicas form a grid (replica_shape)
//     as near to a cube as the counts allow: the axes are visited by
//     ascending count, ties broken core axis first, then x, y, z; each takes
//     ceil(remaining^(1 / axes left)) replicas, at most its count.
//  3. On a rank-4 mesh, a computation that spans a chip's cores
//     (computation_shape[3] == mesh_shape[3]) with no stride, whose replicas
//     fill the mesh, follows TF's rings (mesh_rings.hpp): replica i's chip
//     block is the i-th of the ring of the replica grid, and its logical
//     cores walk the ring of the computation's chips, each chip's cores in
//     turn. (Earlier TF asked for computation_shape[3] == 2 and stepped
//     the inner ring every 2 cores: the same on meshes of two cores per
//     chip, and out of range on meshes of more.) device_order_mode
//     (TF's) overrides the rule: `mesh` never takes the rings, `ring`
//     always does, and is an error where the rule does not hold;
//     `automatic` follows the rule.
//  4. Otherwise replica i's place in the grid counts the core axis
//     fastest, then x, y, z; along each axis it starts at
//     (place / stride) · footprint + place % stride, and its logical cores
//     are the computation's shape, row-major (the last axis fastest),
//     `stride` apart.
//  5. With missing devices TF ignores the grid: replica i's k logical cores
//     are the pod's devices i·k .. i·k + k - 1 in task order (task by task,
//     ordinal by ordinal), which needs a stride of ones and enough devices.
//     The device order mode plays no part there, as in TF.

#include "lockstep/device_assignment.hpp"

#include "pod/mesh_rings.hpp"
#include "pod/mesh_text.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

namespace lockstep {

namespace {

using detail::mesh_text;

/// `given`, or ones of the mesh's rank when empty; checked for its length
/// and sign with TF's texts.
mesh_coordinates checked_vector(mesh_coordinates given, std::size_t rank, const char* name) {
  if (given.empty())
    given.assign(rank, 1);
  if (given.size() != rank)
    throw value_error(std::string(name) + " must have shape [" + std::to_string(rank)
                      + "]; got [" + std::to_string(given.size()) + "]");
  if (std::any_of(given.begin(), given.end(), [](int v) { return v < 1; }))
    throw value_error(std::string(name) + " must be positive; got " + name + "="
                      + mesh_text(given));
  return given;
}

std::size_t product(const mesh_coordinates& values) {
  std::size_t result = 1;
  for (const auto v : values)
    result *= static_cast<std::size_t>(v);
  return result;
}

/// Step 2: the replica grid, near-cubic.
mesh_coordinates replica_grid(const mesh_coordinates& replica_counts, std::size_t num_replicas) {
  const auto rank = replica_counts.size();
  mesh_coordinates shape(rank, 0);
  if (num_replicas == 0)
    return shape;
  // TF sorts (count, (axis + 1) % rank): by count, ties core axis first.
  std::vector<std::pair<int, std::size_t>> order;
  for (std::size_t axis = 0; axis < rank; ++axis)
    order.emplace_back(replica_counts[axis], (axis + 1) % rank);
  std::sort(order.begin(), order.end());
  auto remaining = num_replicas;
  auto axes_left = rank;
  for (const auto& [count, key] : order) {
    const auto axis = (key + rank - 1) % rank;
    // As TF computes it, in doubles (Python's ** is C's pow), so that the
    // same counts give the same grid.
    const auto target = static_cast<std::size_t>(
      std::ceil(std::pow(static_cast<double>(remaining), 1.0 / static_cast<double>(axes_left))));
    shape[axis] = static_cast<int>(std::min(target, static_cast<std::size_t>(count)));
    remaining = (remaining + static_cast<std::size_t>(shape[axis]) - 1)
                / static_cast<std::size_t>(shape[axis]);
    --axes_left;
  }
  // remaining is now 1 (TF asserts it): each axis takes at most what the
  // axes after it, larger or equal, cannot hold, and the last takes all.
  return shape;
}

/// `order`, checked to be one of device_order_mode's three values (TF
/// would take any other as MESH).
device_order_mode checked_order(device_order_mode order) {
  switch (order) {
  case device_order_mode::automatic:
  case device_order_mode::ring:
  case device_order_mode::mesh:
    return order;
  }
  throw value_error("device_order_mode must be device_order_mode::automatic (0), "
                    "device_order_mode::ring (1) or device_order_mode::mesh (2); got "
                    + std::to_string(static_cast<int>(order)));
}

/// Step 3's choice: whether the replicas take the rings. `rule` is TF's
/// condition for them (its enable_3d_tiling); `automatic` follows it,
/// `mesh` never takes them, `ring` needs the rule to hold.
bool takes_rings(device_order_mode order, bool rule) {
  if (order == device_order_mode::ring && !rule)
    throw value_error("device_order_mode=device_order_mode::ring is not compatible with the "
                      "3D tiling current topology.  Try setting "
                      "device_order_mode=device_order_mode::automatic");
  return order == device_order_mode::automatic ? rule : order == device_order_mode::ring;
}

/// Step 3: TF's ring tiling of a rank-4 mesh.
coordinate_table ring_tiling(const mesh_coordinates& computation_shape,
                             const mesh_coordinates& replica_shape, int cores_per_chip,
                             std::size_t num_replicas) {
  const auto inner = detail::ring_3d(computation_shape[0], computation_shape[1],
                                     computation_shape[2]);
  const auto outer = detail::ring_3d(replica_shape[0], replica_shape[1], replica_shape[2]);
  const auto cores = product(computation_shape);
  coordinate_table assignment(num_replicas);
  for (std::size_t replica = 0; replica < num_replicas; ++replica) {
    const auto& block = outer[replica];
    for (std::size_t index = 0; index < cores; ++index) {
      const auto& chip = inner[index / static_cast<std::size_t>(cores_per_chip)];
      mesh_coordinates at(4);
      for (std::size_t axis = 0; axis < 3; ++axis)
        at[axis] = block[axis] * computation_shape[axis] + chip[axis];
      at[3] = static_cast<int>(index % static_cast<std::size_t>(cores_per_chip));
      assignment[replica].push_back(std::move(at));
    }
  }
  return assignment;
}

/// Step 4: the grid's offsets and the computation's cores.
coordinate_table grid_tiling(const mesh_coordinates& computation_shape,
                             const mesh_coordinates& computation_stride,
                             const mesh_coordinates& footprint,
                             const mesh_coordinates& replica_shape, std::size_t num_replicas) {
  const auto rank = computation_shape.size();
  // The logical cores of a replica at offset 0: row-major over the
  // computation's shape, `stride` apart.
  coordinate_table::value_type cores;
  mesh_coordinates step(rank, 0);
  for (std::size_t index = 0, count = product(computation_shape); index < count; ++index) {
    mesh_coordinates at(rank);
    for (std::size_t axis = 0; axis < rank; ++axis)
      at[axis] = step[axis] * computation_stride[axis];
    cores.push_back(std::move(at));
    for (std::size_t axis = rank; axis-- > 0;) {
      if (++step[axis] < computation_shape[axis])
        break;
      step[axis] = 0;
    }
  }
  coordinate_table assignment(num_replicas);
  for (std::size_t replica = 0; replica < num_replicas; ++replica) {
    // The replica's place in the grid, the core axis (the last) fastest.
    mesh_coordinates place(rank);
    auto rest = replica;
    for (std::size_t i = 0; i < rank; ++i) {
      const auto axis = (i + rank - 1) % rank; // the last axis, then 0, 1, ...
      const auto size = static_cast<std::size_t>(replica_shape[axis]);
      place[axis] = static_cast<int>(rest % size);
      rest /= size;
    }
    for (const auto& core : cores) {
      mesh_coordinates at(rank);
      for (std::size_t axis = 0; axis < rank; ++axis) {
        const auto outer = place[axis] / computation_stride[axis];
        const auto inner = place[axis] % computation_stride[axis];
        at[axis] = outer * footprint[axis] + inner + core[axis];
      }
      assignment[replica].push_back(std::move(at));
    }
  }
  return assignment;
}

/// Step 5: devices in task order, on a pod with missing devices.
coordinate_table task_order(const pod_topology& topology, const mesh_coordinates& computation_shape,
                            const mesh_coordinates& computation_stride,
                            std::size_t num_replicas) {
  // TF asserts both conditions; here they are errors that say why.
  if (product(computation_stride) != 1)
    throw value_error("computation_stride must be all ones on a pod with missing devices "
                      "(its replicas take the devices in task order); got computation_stride="
                      + mesh_text(computation_stride) + " with "
                      + std::to_string(topology.num_missing_devices())
                      + " missing devices in a mesh of shape "
                      + mesh_text(topology.mesh_shape()));
  const auto per_replica = product(computation_shape);
  const auto per_task = topology.num_devices_per_task();
  const auto fit = topology.num_devices() / per_replica;
  if (num_replicas > fit)
    throw value_error("requested " + std::to_string(num_replicas) + " replicas but only "
                      + std::to_string(fit) + " replicas with shape "
                      + mesh_text(computation_shape) + " fit on the "
                      + std::to_string(topology.num_devices()) + " devices of a pod mesh of shape "
                      + mesh_text(topology.mesh_shape()) + " with "
                      + std::to_string(topology.num_missing_devices()) + " missing devices");
  coordinate_table assignment(num_replicas);
  for (std::size_t replica = 0; replica < num_replicas; ++replica)
    for (std::size_t index = 0; index < per_replica; ++index) {
      const auto logical_id = replica * per_replica + index;
      assignment[replica].push_back(
        topology.device_coordinates(logical_id / per_task, logical_id % per_task));
    }
  return assignment;
}

} // namespace

device_assignment device_assignment::build(const pod_topology& topology,
                                           mesh_coordinates computation_shape,
                                           mesh_coordinates computation_stride,
                                           std::size_t num_replicas,
                                           device_order_mode order) {
  const auto rank = topology.mesh_rank();
  const auto& mesh_shape = topology.mesh_shape();
  const auto shape = checked_vector(std::move(computation_shape), rank, "computation_shape");
  const auto stride = checked_vector(std::move(computation_stride), rank, "computation_stride");
  order = checked_order(order);

  // Step 1: the footprint and the most replicas. A footprint may pass an
  // int (and then the mesh), so it is taken in 64 bits.
  std::vector<std::int64_t> wide_footprint(rank);
  bool fits = true;
  for (std::size_t axis = 0; axis < rank; ++axis) {
    wide_footprint[axis] = std::int64_t{shape[axis]} * stride[axis];
    fits = fits && wide_footprint[axis] <= mesh_shape[axis];
  }
  if (!fits)
    throw value_error("computation footprint " + mesh_text(wide_footprint)
                      + " does not fit in pod topology shape " + mesh_text(mesh_shape));
  const mesh_coordinates footprint(wide_footprint.begin(), wide_footprint.end());
  mesh_coordinates replica_counts(rank);
  for (std::size_t axis = 0; axis < rank; ++axis)
    replica_counts[axis] = mesh_shape[axis] / footprint[axis] * stride[axis];
  const auto max_replicas = product(replica_counts);
  if (num_replicas > max_replicas)
    throw value_error("requested " + std::to_string(num_replicas) + " replicas but only "
                      + std::to_string(max_replicas) + " replicas with shape " + mesh_text(shape)
                      + " and computation_stride " + mesh_text(stride)
                      + " fit in a pod mesh of shape " + mesh_text(mesh_shape));

  const auto cores = product(shape);
  if (topology.num_missing_devices() != 0)
    return device_assignment(topology, task_order(topology, shape, stride, num_replicas), cores);

  const auto replica_shape = replica_grid(replica_counts, num_replicas);
  const bool ring = takes_rings(order, rank == 4 && shape[3] == mesh_shape[3]
                                          && product(stride) == 1 && num_replicas == max_replicas);
  auto assignment = ring ? ring_tiling(shape, replica_shape, mesh_shape[3], num_replicas)
                         : grid_tiling(shape, stride, footprint, replica_shape, num_replicas);
  return device_assignment(topology, std::move(assignment), cores);
}

} // namespace lockstep

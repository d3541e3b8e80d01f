// device_assignment: TF's DeviceAssignment, its checks, and the lookups of
// a (replica, logical core) pair's coordinates, task and device.
// (device_assignment::build is in device_assignment_build.cpp.)

#include "lockstep/device_assignment.hpp"

#include "pod/mesh_text.hpp"

#include "lockstep/error.hpp"

#include <map>
#include <string>
#include <utility>

namespace lockstep {

namespace {

using detail::mesh_text;

std::string where(std::size_t replica, std::size_t logical_core) {
  return "replica " + std::to_string(replica) + " logical core " + std::to_string(logical_core);
}

[[noreturn]] void throw_not_rank_3(const std::string& got) {
  throw value_error("core_assignment must be a rank 3 array, got " + got);
}

/// Checks that `core_assignment` is a rank-3 table (TF's first error; a
/// ragged table names the replica or core that differs) whose minor
/// dimension is the mesh's rank (TF's second); returns the cores per
/// replica.
std::size_t checked_shape(const coordinate_table& core_assignment, std::size_t mesh_rank) {
  const auto replicas = core_assignment.size();
  if (replicas == 0)
    throw_not_rank_3("shape [0]");
  const auto cores = core_assignment.front().size();
  for (std::size_t r = 1; r < replicas; ++r)
    if (core_assignment[r].size() != cores)
      throw_not_rank_3("a ragged array: replica " + std::to_string(r) + " has "
                       + std::to_string(core_assignment[r].size())
                       + " logical cores, replica 0 has " + std::to_string(cores));
  if (cores == 0)
    throw_not_rank_3("shape [" + std::to_string(replicas) + ", 0]");
  const auto minor = core_assignment.front().front().size();
  for (std::size_t r = 0; r < replicas; ++r)
    for (std::size_t c = 0; c < cores; ++c)
      if (core_assignment[r][c].size() != minor)
        throw_not_rank_3("a ragged array: " + where(r, c) + " has "
                         + std::to_string(core_assignment[r][c].size())
                         + " coordinates, replica 0 logical core 0 has "
                         + std::to_string(minor));
  if (minor != mesh_rank)
    throw value_error("core_assignment.shape[-1] must have size equal to topology rank ("
                      + std::to_string(mesh_rank) + "), got core_assignment.shape=["
                      + std::to_string(replicas) + ", " + std::to_string(cores) + ", "
                      + std::to_string(minor) + "]");
  return cores;
}

} // namespace

coordinate_table single_core_assignment(std::size_t mesh_rank) {
  return {{mesh_coordinates(mesh_rank, 0)}};
}

// -- construction -------------------------------------------------------------

device_assignment::device_assignment(pod_topology topology, coordinate_table core_assignment)
  : device_assignment(std::move(topology), std::move(core_assignment), 0) {}

device_assignment::device_assignment(pod_topology topology, coordinate_table core_assignment,
                                     std::size_t num_cores_per_replica)
  : topology_(std::move(topology)), core_assignment_(std::move(core_assignment)),
    num_cores_per_replica_(num_cores_per_replica) {
  // build passes its count (an assignment of 0 replicas has no table to
  // read it from); a table from the program is checked for its shape.
  if (num_cores_per_replica_ == 0)
    num_cores_per_replica_ = checked_shape(core_assignment_, topology_.mesh_rank());
  // TF maps each pair's coordinates to its task without a check: numpy
  // indexes out of the mesh (or wraps a negative coordinate), a missing
  // device counts as task -1, and two pairs may share a device. Here each
  // is an error, naming the pairs.
  replicas_by_task_.assign(topology_.num_tasks(),
                           std::vector<std::vector<std::size_t>>(num_cores_per_replica_));
  std::map<mesh_coordinates, std::pair<std::size_t, std::size_t>> pair_at;
  for (std::size_t r = 0; r < core_assignment_.size(); ++r)
    for (std::size_t c = 0; c < num_cores_per_replica_; ++c) {
      const auto& at = core_assignment_[r][c];
      if (!topology_.has_device_at(at)) {
        bool inside = true;
        for (std::size_t axis = 0; axis < at.size(); ++axis)
          inside = inside && at[axis] >= 0 && at[axis] < topology_.mesh_shape()[axis];
        throw value_error("core_assignment: " + where(r, c) + " is at " + mesh_text(at)
                          + (inside ? ", where the pod has no device (one of its missing devices)"
                                    : ", outside the mesh of shape "
                                        + mesh_text(topology_.mesh_shape())));
      }
      const auto [found, added] = pair_at.emplace(at, std::pair{r, c});
      if (!added)
        throw value_error("core_assignment: " + where(r, c) + " is at " + mesh_text(at)
                          + ", as is " + where(found->second.first, found->second.second)
                          + ": each device runs one logical core of one replica");
      // Replicas come in ascending order, so each list stays sorted.
      replicas_by_task_[topology_.task_ordinal_at_coordinates(at)][c].push_back(r);
    }
}

// -- lookups ------------------------------------------------------------------

const mesh_coordinates& device_assignment::coordinates(std::size_t replica,
                                                       std::size_t logical_core) const {
  if (replica >= num_replicas())
    throw value_error("device_assignment: replica " + std::to_string(replica)
                      + " is out of range: there are " + std::to_string(num_replicas())
                      + " replicas");
  if (logical_core >= num_cores_per_replica())
    throw value_error("device_assignment: logical core " + std::to_string(logical_core)
                      + " is out of range: each replica has "
                      + std::to_string(num_cores_per_replica()) + " logical cores");
  return core_assignment_[replica][logical_core];
}

std::size_t device_assignment::device_ordinal(std::size_t replica,
                                              std::size_t logical_core) const {
  return topology_.device_ordinal_at_coordinates(coordinates(replica, logical_core));
}

device_spec device_assignment::host_device(std::size_t replica, std::size_t logical_core) const {
  return topology_.host_device_at_coordinates(coordinates(replica, logical_core));
}

const device_spec& device_assignment::device(std::size_t replica,
                                             std::size_t logical_core) const {
  return topology_.device_at_coordinates(coordinates(replica, logical_core));
}

const std::vector<std::size_t>& device_assignment::lookup_replicas(std::size_t task,
                                                                   std::size_t logical_core) const {
  if (task < replicas_by_task_.size() && logical_core < num_cores_per_replica_
      && !replicas_by_task_[task][logical_core].empty())
    return replicas_by_task_[task][logical_core];
  throw value_error("Can not find any replica in task: " + std::to_string(task)
                    + " contains logical_core: " + std::to_string(logical_core) + " ");
}

} // namespace lockstep

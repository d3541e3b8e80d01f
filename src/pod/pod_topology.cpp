// pod_topology: the explicit constructors, their checks, and the lookups
// by coordinates (TF's inverted topology: a task and a device ordinal per
// mesh coordinate, -1 where the device is missing).

#include "lockstep/pod_topology.hpp"

#include "pod/mesh_text.hpp"

#include "lockstep/error.hpp"

#include <map>
#include <string>
#include <utility>

namespace lockstep {

namespace {

using detail::mesh_text;

std::string where(std::size_t task, std::size_t device) {
  return "task " + std::to_string(task) + " device " + std::to_string(device);
}

/// TF's message for device coordinates that are not a rank-3 table whose
/// minor dimension is the mesh's rank, followed by `got`.
[[noreturn]] void throw_not_rank_3(std::size_t mesh_rank, const std::string& got) {
  throw value_error("`device_coordinates` must be a rank 3 array with minor dimension equal "
                    "to the mesh shape rank ("
                    + std::to_string(mesh_rank) + "); got " + got);
}

/// The names of a topology given without them: this process's CPU devices
/// for one task, /job:worker/replica:0/task:<t>/device:CPU:<d> for several.
std::vector<std::vector<device_spec>> default_names(std::size_t tasks, std::size_t per_task) {
  std::vector<std::vector<device_spec>> names(tasks);
  for (std::size_t t = 0; t < tasks; ++t)
    for (std::size_t d = 0; d < per_task; ++d)
      names[t].push_back(tasks == 1 ? cpu_device(static_cast<int>(d))
                                    : device_spec::parse("/job:worker/replica:0/task:"
                                                         + std::to_string(t) + "/device:CPU:"
                                                         + std::to_string(d)));
  return names;
}

/// The host of a canonical `device`: its job, replica and task.
device_spec host_of(const device_spec& device) {
  return device_spec::parse("/job:" + device.job().value_or("") + "/replica:"
                            + std::to_string(device.replica().value_or(0)) + "/task:"
                            + std::to_string(device.task().value_or(0)));
}

/// `names`, canonical, after checking that they name each device once,
/// each task's on one host and different tasks' on different hosts.
std::vector<std::vector<device_spec>> checked_names(std::vector<std::vector<device_spec>> names,
                                                    std::size_t tasks, std::size_t per_task) {
  const auto expected = "[" + std::to_string(tasks) + "][" + std::to_string(per_task) + "]";
  if (names.size() != tasks)
    throw value_error("pod_topology: `devices` must name every device of `device_coordinates` "
                      + expected + "; got names for " + std::to_string(names.size()) + " tasks");
  std::map<device_spec, std::size_t> tasks_of_hosts;
  for (std::size_t t = 0; t < tasks; ++t) {
    if (names[t].size() != per_task)
      throw value_error("pod_topology: `devices` must name every device of "
                        "`device_coordinates` "
                        + expected + "; got " + std::to_string(names[t].size())
                        + " names for task " + std::to_string(t));
    for (auto& name : names[t])
      name = name.canonical();
    const auto host = host_of(names[t].front());
    std::map<device_spec, std::size_t> ordinals;
    for (std::size_t d = 0; d < per_task; ++d) {
      if (host_of(names[t][d]) != host)
        throw value_error("pod_topology: the devices of task " + std::to_string(t)
                          + " must be on one host, but " + names[t].front().to_string()
                          + " and " + names[t][d].to_string() + " are not");
      const auto [found, added] = ordinals.emplace(names[t][d], d);
      if (!added)
        throw value_error("pod_topology: task " + std::to_string(t) + " names "
                          + names[t][d].to_string() + " twice (devices "
                          + std::to_string(found->second) + " and " + std::to_string(d) + ")");
    }
    const auto [found, added] = tasks_of_hosts.emplace(host, t);
    if (!added)
      throw value_error("pod_topology: tasks " + std::to_string(found->second) + " and "
                        + std::to_string(t) + " are both on host " + host.to_string());
  }
  return names;
}

} // namespace

// -- construction -------------------------------------------------------------

pod_topology::pod_topology(mesh_coordinates mesh_shape, coordinate_table device_coordinates)
  : mesh_shape_(std::move(mesh_shape)), device_coordinates_(std::move(device_coordinates)) {
  index_devices();
  devices_ = default_names(num_tasks(), num_devices_per_task());
}

pod_topology::pod_topology(mesh_coordinates mesh_shape, coordinate_table device_coordinates,
                           std::vector<std::vector<device_spec>> devices)
  : mesh_shape_(std::move(mesh_shape)), device_coordinates_(std::move(device_coordinates)) {
  index_devices();
  devices_ = checked_names(std::move(devices), num_tasks(), num_devices_per_task());
}

void pod_topology::index_devices() {
  // TF's checks first (a positive mesh shape, a rank-3 table), then what
  // TF leaves to numpy's indexing: coordinates outside the mesh, and two
  // devices at one coordinate (TF keeps the last silently).
  bool positive = !mesh_shape_.empty();
  for (const auto size : mesh_shape_)
    positive = positive && size >= 1;
  if (!positive)
    throw value_error("`mesh_shape` must be a sequence of positive entries; got "
                      + mesh_text(mesh_shape_));
  std::size_t cells = 1;
  for (const auto size : mesh_shape_) {
    if (cells > max_pod_mesh_size / static_cast<std::size_t>(size))
      throw value_error("pod_topology: a mesh of shape " + mesh_text(mesh_shape_)
                        + " has more than max_pod_mesh_size ("
                        + std::to_string(max_pod_mesh_size) + ") coordinates");
    cells *= static_cast<std::size_t>(size);
  }

  const auto rank = mesh_rank();
  const auto tasks = device_coordinates_.size();
  if (tasks == 0)
    throw_not_rank_3(rank, "shape [0]");
  const auto per_task = device_coordinates_.front().size();
  for (std::size_t t = 1; t < tasks; ++t)
    if (device_coordinates_[t].size() != per_task)
      throw_not_rank_3(rank, "a ragged array: task " + std::to_string(t) + " has "
                               + std::to_string(device_coordinates_[t].size())
                               + " devices, task 0 has " + std::to_string(per_task));
  if (per_task == 0)
    throw_not_rank_3(rank, "shape [" + std::to_string(tasks) + ", 0]");
  const auto minor = device_coordinates_.front().front().size();
  for (std::size_t t = 0; t < tasks; ++t)
    for (std::size_t d = 0; d < per_task; ++d)
      if (device_coordinates_[t][d].size() != minor)
        throw_not_rank_3(rank, "a ragged array: " + where(t, d) + " has "
                                 + std::to_string(device_coordinates_[t][d].size())
                                 + " coordinates, task 0 device 0 has " + std::to_string(minor));
  if (minor != rank)
    throw_not_rank_3(rank, "shape [" + std::to_string(tasks) + ", " + std::to_string(per_task)
                             + ", " + std::to_string(minor) + "]");

  tasks_at_.assign(cells, -1);
  ordinals_at_.assign(cells, -1);
  for (std::size_t t = 0; t < tasks; ++t)
    for (std::size_t d = 0; d < per_task; ++d) {
      const auto& at = device_coordinates_[t][d];
      bool inside = true;
      for (std::size_t axis = 0; axis < rank; ++axis)
        inside = inside && at[axis] >= 0 && at[axis] < mesh_shape_[axis];
      if (!inside)
        throw value_error("pod_topology: " + where(t, d) + " is at " + mesh_text(at)
                          + ", outside the mesh of shape " + mesh_text(mesh_shape_));
      const auto cell = index_of(at);
      if (tasks_at_[cell] >= 0)
        throw value_error("pod_topology: " + where(t, d) + " is at " + mesh_text(at)
                          + ", as is "
                          + where(static_cast<std::size_t>(tasks_at_[cell]),
                                  static_cast<std::size_t>(ordinals_at_[cell])));
      tasks_at_[cell] = static_cast<int>(t);
      ordinals_at_[cell] = static_cast<int>(d);
    }
}

std::vector<mesh_coordinates> pod_topology::missing_devices() const {
  std::vector<mesh_coordinates> missing;
  mesh_coordinates at(mesh_rank(), 0);
  for (const auto task : tasks_at_) {
    if (task < 0)
      missing.push_back(at);
    for (std::size_t axis = mesh_rank(); axis-- > 0;) { // the next coordinates, row-major
      if (++at[axis] < mesh_shape_[axis])
        break;
      at[axis] = 0;
    }
  }
  return missing;
}

// -- lookups ------------------------------------------------------------------

const mesh_coordinates& pod_topology::device_coordinates(std::size_t task,
                                                         std::size_t device) const {
  if (task >= num_tasks())
    throw value_error("pod_topology: task " + std::to_string(task)
                      + " is out of range: the pod has " + std::to_string(num_tasks())
                      + " tasks");
  if (device >= num_devices_per_task())
    throw value_error("pod_topology: device " + std::to_string(device)
                      + " is out of range: each task has "
                      + std::to_string(num_devices_per_task()) + " devices");
  return device_coordinates_[task][device];
}

std::size_t pod_topology::index_of(const mesh_coordinates& coordinates) const {
  if (coordinates.size() != mesh_rank())
    throw value_error("pod_topology: coordinates " + mesh_text(coordinates) + " have "
                      + std::to_string(coordinates.size()) + " entries; the mesh has rank "
                      + std::to_string(mesh_rank()));
  std::size_t index = 0;
  for (std::size_t axis = 0; axis < mesh_rank(); ++axis) {
    const auto at = coordinates[axis];
    if (at < 0 || at >= mesh_shape_[axis])
      throw value_error("pod_topology: coordinates " + mesh_text(coordinates)
                        + " lie outside the mesh of shape " + mesh_text(mesh_shape_));
    index = index * static_cast<std::size_t>(mesh_shape_[axis]) + static_cast<std::size_t>(at);
  }
  return index;
}

std::size_t pod_topology::device_index_of(const mesh_coordinates& coordinates) const {
  const auto index = index_of(coordinates);
  if (tasks_at_[index] < 0)
    throw value_error("pod_topology: no device at coordinates " + mesh_text(coordinates)
                      + ": it is one of the pod's missing devices");
  return index;
}

bool pod_topology::has_device_at(const mesh_coordinates& coordinates) const noexcept {
  if (coordinates.size() != mesh_rank())
    return false;
  std::size_t index = 0;
  for (std::size_t axis = 0; axis < mesh_rank(); ++axis) {
    if (coordinates[axis] < 0 || coordinates[axis] >= mesh_shape_[axis])
      return false;
    index = index * static_cast<std::size_t>(mesh_shape_[axis])
            + static_cast<std::size_t>(coordinates[axis]);
  }
  return tasks_at_[index] >= 0;
}

std::size_t pod_topology::task_ordinal_at_coordinates(const mesh_coordinates& coordinates) const {
  return static_cast<std::size_t>(tasks_at_[device_index_of(coordinates)]);
}

std::size_t
pod_topology::device_ordinal_at_coordinates(const mesh_coordinates& coordinates) const {
  return static_cast<std::size_t>(ordinals_at_[device_index_of(coordinates)]);
}

const device_spec& pod_topology::device_at_coordinates(const mesh_coordinates& coordinates) const {
  const auto index = device_index_of(coordinates);
  return devices_[static_cast<std::size_t>(tasks_at_[index])]
                 [static_cast<std::size_t>(ordinals_at_[index])];
}

device_spec pod_topology::host_device_at_coordinates(const mesh_coordinates& coordinates) const {
  return host_device(task_ordinal_at_coordinates(coordinates));
}

const device_spec& pod_topology::device(std::size_t task, std::size_t ordinal) const {
  device_coordinates(task, ordinal); // the range checks
  return devices_[task][ordinal];
}

device_spec pod_topology::host_device(std::size_t task) const {
  return device_spec::parse(host_of(device(task, 0)).to_string() + "/device:CPU:0");
}

} // namespace lockstep

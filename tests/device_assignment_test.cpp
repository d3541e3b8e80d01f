// device_assignment: TF's DeviceAssignment and its checks, the lookups of
// a (replica, logical core) pair, and device_assignment::build: TF's
// algorithm on cases worked out by hand in the comments (the replica grid,
// strides, replica counts that fit and that do not, the ring tiling, each
// device order mode, pods with missing devices) and every error. The ring orders (mesh_rings) are
// checked against TF's own figures. No actor system. Suite 'unit'.

#include "lockstep/device_assignment.hpp"

#include "pod/mesh_rings.hpp"

#include "lockstep/error.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

using namespace lockstep;
using detail::chip_point;

namespace {

const std::string local = "/job:localhost/replica:0/task:0/device:";

std::string worker(int task, const std::string& device) {
  return "/job:worker/replica:0/task:" + std::to_string(task) + "/device:" + device;
}

/// This process's 8 CPU devices on TF's v3-8 mesh [2, 2, 1, 2]: device d
/// is core d % 2 of chip d / 2, chip c at x = c % 2, y = c / 2.
pod_topology v3_8() {
  return pod_topology::from_devices(cpu_devices(8));
}

/// The device ordinal of every (replica, logical core), [replica][core].
std::vector<std::vector<std::size_t>> ordinals(const device_assignment& assignment) {
  std::vector<std::vector<std::size_t>> result(assignment.num_replicas());
  for (std::size_t r = 0; r < assignment.num_replicas(); ++r)
    for (std::size_t c = 0; c < assignment.num_cores_per_replica(); ++c)
      result[r].push_back(assignment.device_ordinal(r, c));
  return result;
}

std::string refusal(const pod_topology& topology, const coordinate_table& core_assignment) {
  return error_of<value_error>([&] { (void)device_assignment(topology, core_assignment); });
}

std::string build_refusal(const pod_topology& topology, const mesh_coordinates& shape,
                          const mesh_coordinates& stride, std::size_t num_replicas,
                          device_order_mode order = device_order_mode::automatic) {
  return error_of<value_error>(
    [&] { device_assignment::build(topology, shape, stride, num_replicas, order); });
}

/// TF's error for device_order_mode RING where the rings do not apply.
const std::string ring_refused =
  "device_order_mode=device_order_mode::ring is not compatible with the 3D tiling current "
  "topology.  Try setting device_order_mode=device_order_mode::automatic";

} // namespace

// -- DeviceAssignment(topology, core_assignment) ------------------------------

TEST_CASE("an explicit core assignment: its properties and lookups") {
  const device_assignment assignment(
    v3_8(), {{{0, 0, 0, 0}, {0, 0, 0, 1}}, {{1, 1, 0, 0}, {1, 1, 0, 1}}});
  CHECK(assignment.num_replicas() == 2);
  CHECK(assignment.num_cores_per_replica() == 2);
  CHECK(assignment.topology() == v3_8());
  CHECK(assignment.coordinates(1, 0) == mesh_coordinates{1, 1, 0, 0});
  CHECK(assignment.core_assignment()[1][1] == mesh_coordinates{1, 1, 0, 1});
  // Chip (1, 1) is chip 3: devices 6 and 7.
  CHECK(assignment.device_ordinal(1, 0) == 6);
  CHECK(assignment.device_ordinal(1, 1) == 7);
  CHECK(assignment.device_ordinal() == 0); // replica 0, logical core 0
  CHECK(assignment.device(1, 1).to_string() == local + "CPU:7");
  CHECK(assignment.device().to_string() == local + "CPU:0");
  CHECK(assignment.host_device(1, 1).to_string() == local + "CPU:0");
  CHECK(assignment.lookup_replicas(0, 0) == std::vector<std::size_t>{0, 1});
  CHECK(assignment.lookup_replicas(0, 1) == std::vector<std::size_t>{0, 1});
}

TEST_CASE("lookup_replicas: TF's error where no replica is found") {
  const device_assignment assignment(v3_8(), {{{0, 0, 0, 0}}});
  // TF's text, its trailing space included.
  CHECK(error_of<value_error>([&] { assignment.lookup_replicas(1, 0); })
        == "Can not find any replica in task: 1 contains logical_core: 0 ");
  CHECK(error_of<value_error>([&] { assignment.lookup_replicas(0, 1); })
        == "Can not find any replica in task: 0 contains logical_core: 1 ");
}

TEST_CASE("coordinates of a replica or logical core out of range") {
  const device_assignment assignment(v3_8(), {{{0, 0, 0, 0}, {0, 0, 0, 1}},
                                              {{1, 0, 0, 0}, {1, 0, 0, 1}}});
  CHECK(error_of<value_error>([&] { assignment.coordinates(2, 0); })
        == "device_assignment: replica 2 is out of range: there are 2 replicas");
  CHECK(error_of<value_error>([&] { assignment.device(0, 5); })
        == "device_assignment: logical core 5 is out of range: each replica has 2 logical cores");
  CHECK(error_of<value_error>([&] { assignment.device_ordinal(3); })
        == "device_assignment: replica 3 is out of range: there are 2 replicas");
  CHECK(error_of<value_error>([&] { assignment.host_device(0, 2); })
        == "device_assignment: logical core 2 is out of range: each replica has 2 logical cores");
}

TEST_CASE("single_core_assignment: one replica of one core at the origin") {
  CHECK(single_core_assignment() == coordinate_table{{{0, 0, 0, 0}}});
  CHECK(single_core_assignment(2) == coordinate_table{{{0, 0}}});
  const device_assignment assignment(v3_8(), single_core_assignment());
  CHECK(assignment.num_replicas() == 1);
  CHECK(assignment.num_cores_per_replica() == 1);
  CHECK(assignment.device().to_string() == local + "CPU:0");
  // TF's constant has rank 4; another mesh's rank needs its own.
  const pod_topology line({2}, {{{0}, {1}}});
  CHECK(device_assignment(line, single_core_assignment(1)).device_ordinal() == 0);
}

TEST_CASE("a core assignment must be a rank 3 table of the topology's rank") {
  const auto topology = v3_8();
  const std::string not_rank_3 = "core_assignment must be a rank 3 array, got ";
  CHECK(refusal(topology, {}) == not_rank_3 + "shape [0]");
  CHECK(refusal(topology, {{}}) == not_rank_3 + "shape [1, 0]");
  CHECK(refusal(topology, {{{0, 0, 0, 0}, {0, 0, 0, 1}}, {{1, 0, 0, 0}}})
        == not_rank_3 + "a ragged array: replica 1 has 1 logical cores, replica 0 has 2");
  CHECK(refusal(topology, {{{0, 0, 0, 0}}, {{1, 0, 0}}})
        == not_rank_3
             + "a ragged array: replica 1 logical core 0 has 3 coordinates, replica 0 logical "
               "core 0 has 4");
  CHECK(refusal(topology, {{{0, 0, 0}}, {{1, 0, 0}}})
        == "core_assignment.shape[-1] must have size equal to topology rank (4), got "
           "core_assignment.shape=[2, 1, 3]");
}

TEST_CASE("a core assignment must name devices of the pod, each once") {
  const auto topology = v3_8();
  CHECK(refusal(topology, {{{0, 0, 0, 0}}, {{2, 0, 0, 0}}})
        == "core_assignment: replica 1 logical core 0 is at [2, 0, 0, 0], outside the mesh of "
           "shape [2, 2, 1, 2]");
  CHECK(refusal(topology, {{{0, -1, 0, 0}}})
        == "core_assignment: replica 0 logical core 0 is at [0, -1, 0, 0], outside the mesh of "
           "shape [2, 2, 1, 2]");
  CHECK(refusal(topology, {{{0, 0, 0, 0}, {0, 0, 0, 1}}, {{0, 0, 0, 1}, {1, 0, 0, 0}}})
        == "core_assignment: replica 1 logical core 0 is at [0, 0, 0, 1], as is replica 0 "
           "logical core 1: each device runs one logical core of one replica");
  const pod_topology holed({2, 1, 1, 1}, {{{1, 0, 0, 0}}});
  CHECK(refusal(holed, {{{0, 0, 0, 0}}})
        == "core_assignment: replica 0 logical core 0 is at [0, 0, 0, 0], where the pod has no "
           "device (one of its missing devices)");
}

TEST_CASE("lookup_replicas over two tasks") {
  const pod_topology two_hosts({2, 1, 1, 2}, {{{0, 0, 0, 0}, {0, 0, 0, 1}},
                                              {{1, 0, 0, 0}, {1, 0, 0, 1}}});
  // Replica 0 on task 1, replica 1 on task 0 with its cores swapped.
  const device_assignment assignment(two_hosts, {{{1, 0, 0, 0}, {1, 0, 0, 1}},
                                                 {{0, 0, 0, 1}, {0, 0, 0, 0}}});
  CHECK(assignment.lookup_replicas(1, 0) == std::vector<std::size_t>{0});
  CHECK(assignment.lookup_replicas(0, 1) == std::vector<std::size_t>{1});
  CHECK(assignment.device(0, 1).to_string() == worker(1, "CPU:1"));
  CHECK(assignment.host_device(0, 1).to_string() == worker(1, "CPU:0"));
  CHECK(assignment.device_ordinal(1, 0) == 1);
  CHECK(error_of<value_error>([&] { assignment.lookup_replicas(2, 0); })
        == "Can not find any replica in task: 2 contains logical_core: 0 ");
}

// -- build: the replica grid ------------------------------------------------------

TEST_CASE("build with the defaults: one replica of one core at the origin") {
  const auto assignment = device_assignment::build(v3_8());
  CHECK(assignment.num_replicas() == 1);
  CHECK(assignment.num_cores_per_replica() == 1);
  CHECK(assignment.core_assignment() == coordinate_table{{{0, 0, 0, 0}}});
}

TEST_CASE("build: eight replicas of one core fill the v3-8, core axis fastest") {
  // replica_counts = mesh / footprint · stride = [2, 2, 1, 2], 8 at most.
  // The grid: axes by (count, (axis + 1) % 4): z (1), core (2, key 0),
  // x (2, key 1), y (2, key 2). z: ceil(8^(1/4)) = 2, at most 1 -> 1;
  // core: ceil(8^(1/3)) = 2 -> 2, 4 left; x: ceil(4^(1/2)) = 2, 2 left;
  // y: 2. Grid [2, 2, 1, 2]; replica r is at core r % 2, x (r / 2) % 2,
  // y r / 4: device r. Not a ring: computation_shape[3] = 1, not 2.
  const auto assignment = device_assignment::build(v3_8(), {}, {}, 8);
  CHECK(assignment.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}}, {{0, 0, 0, 1}}, {{1, 0, 0, 0}}, {{1, 0, 0, 1}},
                            {{0, 1, 0, 0}}, {{0, 1, 0, 1}}, {{1, 1, 0, 0}}, {{1, 1, 0, 1}}});
  CHECK(ordinals(assignment)
        == std::vector<std::vector<std::size_t>>{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  CHECK(assignment.lookup_replicas(0, 0) == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("build: four replicas prefer a grid of (2, 1, 1, 2) over (1, 1, 2, 2)") {
  // TF's own example. z: ceil(4^(1/4)) = 2 -> 1; core: ceil(4^(1/3)) = 2
  // -> 2, 2 left; x: ceil(2^(1/2)) = 2 -> 2, 1 left; y: 1. Grid [2, 1, 1, 2]:
  // both cores of chip (0, 0), then both of chip (1, 0).
  const auto assignment = device_assignment::build(v3_8(), {1, 1, 1, 1}, {1, 1, 1, 1}, 4);
  CHECK(assignment.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}}, {{0, 0, 0, 1}}, {{1, 0, 0, 0}}, {{1, 0, 0, 1}}});
  CHECK(ordinals(assignment) == std::vector<std::vector<std::size_t>>{{0}, {1}, {2}, {3}});
}

TEST_CASE("build: three replicas of a chip's two cores, short of a ring") {
  // computation_shape [1, 1, 1, 2]: replica_counts [2, 2, 1, 1], 4 at most;
  // 3 do not fill the mesh, so no ring. core: ceil(3^(1/4)) = 2 -> 1;
  // z: ceil(3^(1/3)) = 2 -> 1; x: ceil(3^(1/2)) = 2 -> 2, ceil(3 / 2) = 2
  // left; y: 2. Grid [2, 2, 1, 1]: x fastest, so replica 2 is at (0, 1).
  const auto assignment = device_assignment::build(v3_8(), {1, 1, 1, 2}, {}, 3);
  CHECK(assignment.num_cores_per_replica() == 2);
  CHECK(assignment.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}, {0, 0, 0, 1}},
                            {{1, 0, 0, 0}, {1, 0, 0, 1}},
                            {{0, 1, 0, 0}, {0, 1, 0, 1}}});
  CHECK(ordinals(assignment) == std::vector<std::vector<std::size_t>>{{0, 1}, {2, 3}, {4, 5}});
}

TEST_CASE("build: a computation's cores are row-major over its shape") {
  // computation_shape [2, 1, 1, 2] on the v3-8: footprint [2, 1, 1, 2],
  // replica_counts [1, 2, 1, 1], 2 at most; 1 replica is no ring. Its
  // cores: (0,0,0,0), (0,0,0,1), (1,0,0,0), (1,0,0,1), the last axis fastest.
  const auto one = device_assignment::build(v3_8(), {2, 1, 1, 2}, {}, 1);
  CHECK(one.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}, {0, 0, 0, 1}, {1, 0, 0, 0}, {1, 0, 0, 1}}});
  CHECK(ordinals(one) == std::vector<std::vector<std::size_t>>{{0, 1, 2, 3}});
}

// -- build: strides ---------------------------------------------------------------

TEST_CASE("build: a stride interleaves the replicas") {
  // A line of 4 devices, [4, 1, 1, 1]; shape [2, 1, 1, 1] with stride
  // [2, 1, 1, 1]: footprint [4, 1, 1, 1], block_counts [1, 1, 1, 1],
  // replica_counts [2, 1, 1, 1], 2 at most. Replica 1 is at place 1 on x:
  // outer 1 / 2 = 0, inner 1 % 2 = 1, offset 0 · 4 + 1 = 1. The cores are
  // 2 apart: replica 0 takes x 0 and 2, replica 1 x 1 and 3. (No ring: the
  // stride is not all ones.)
  const pod_topology line({4, 1, 1, 1},
                          {{{0, 0, 0, 0}, {1, 0, 0, 0}, {2, 0, 0, 0}, {3, 0, 0, 0}}});
  const auto assignment = device_assignment::build(line, {2, 1, 1, 1}, {2, 1, 1, 1}, 2);
  CHECK(assignment.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}, {2, 0, 0, 0}}, {{1, 0, 0, 0}, {3, 0, 0, 0}}});
  CHECK(build_refusal(line, {2, 1, 1, 1}, {2, 1, 1, 1}, 3)
        == "requested 3 replicas but only 2 replicas with shape [2, 1, 1, 1] and "
           "computation_stride [2, 1, 1, 1] fit in a pod mesh of shape [4, 1, 1, 1]");
}

TEST_CASE("build on a rank-2 mesh with a stride") {
  // Mesh [4, 4], device d at (d / 4, d % 4). Shape [2, 1], stride [2, 1]:
  // footprint [4, 1], block_counts [1, 4], replica_counts [2, 4], 8 at
  // most. Grid: axis 0 (count 2, key 1) before axis 1 (count 4, key 0):
  // ceil(8^(1/2)) = 3 -> 2, 4 left; axis 1: 4. Grid [2, 4]; the last axis
  // fastest: replica r is at place (r / 4, r % 4); axis 0 has stride 2, so
  // its offset is the place itself (outer 0, inner r / 4); axis 1's is
  // r % 4. The cores: (0, 0) and (2, 0) from there.
  coordinate_table coordinates(1);
  for (int d = 0; d < 16; ++d)
    coordinates[0].push_back({d / 4, d % 4});
  const pod_topology square({4, 4}, coordinates);
  const auto assignment = device_assignment::build(square, {2, 1}, {2, 1}, 8);
  REQUIRE(assignment.num_replicas() == 8);
  for (int r = 0; r < 8; ++r) {
    CAPTURE(r);
    CHECK(assignment.coordinates(static_cast<std::size_t>(r), 0) == mesh_coordinates{r / 4, r % 4});
    CHECK(assignment.coordinates(static_cast<std::size_t>(r), 1)
          == mesh_coordinates{r / 4 + 2, r % 4});
  }
  // Replica 5: (1, 1) and (3, 1), devices 5 and 13.
  CHECK(assignment.device_ordinal(5, 0) == 5);
  CHECK(assignment.device_ordinal(5, 1) == 13);
}

// -- build: what fits ----------------------------------------------------------------

TEST_CASE("build: the most replicas fit, one more does not") {
  const auto topology = v3_8();
  CHECK(device_assignment::build(topology, {1, 1, 1, 2}, {}, 4).num_replicas() == 4);
  CHECK(build_refusal(topology, {1, 1, 1, 2}, {}, 5)
        == "requested 5 replicas but only 4 replicas with shape [1, 1, 1, 2] and "
           "computation_stride [1, 1, 1, 1] fit in a pod mesh of shape [2, 2, 1, 2]");
  CHECK(build_refusal(topology, {}, {}, 9)
        == "requested 9 replicas but only 8 replicas with shape [1, 1, 1, 1] and "
           "computation_stride [1, 1, 1, 1] fit in a pod mesh of shape [2, 2, 1, 2]");
  // A stride does not cost replicas. Shape [1, 1, 1, 1], stride
  // [1, 2, 1, 1]: footprint [1, 2, 1, 1], block_counts [2, 1, 1, 2],
  // replica_counts = block_counts · stride = [2, 2, 1, 2]: 8.
  CHECK(device_assignment::build(topology, {}, {1, 2, 1, 1}, 8).num_replicas() == 8);
}

TEST_CASE("build: a footprint that does not fit the mesh") {
  const auto topology = v3_8();
  CHECK(build_refusal(topology, {4, 1, 1, 1}, {}, 1)
        == "computation footprint [4, 1, 1, 1] does not fit in pod topology shape [2, 2, 1, 2]");
  CHECK(build_refusal(topology, {1, 1, 1, 1}, {1, 1, 2, 1}, 1)
        == "computation footprint [1, 1, 2, 1] does not fit in pod topology shape [2, 2, 1, 2]");
  // shape · stride past an int is taken in 64 bits.
  CHECK(build_refusal(topology, {65536, 1, 1, 1}, {65536, 1, 1, 1}, 1)
        == "computation footprint [4294967296, 1, 1, 1] does not fit in pod topology shape "
           "[2, 2, 1, 2]");
}

TEST_CASE("build: TF's errors for a shape or stride of the wrong length or sign") {
  const auto topology = v3_8();
  CHECK(build_refusal(topology, {1, 1, 1}, {}, 1)
        == "computation_shape must have shape [4]; got [3]");
  CHECK(build_refusal(topology, {}, {1, 1}, 1) == "computation_stride must have shape [4]; got [2]");
  CHECK(build_refusal(topology, {0, 1, 1, 1}, {}, 1)
        == "computation_shape must be positive; got computation_shape=[0, 1, 1, 1]");
  CHECK(build_refusal(topology, {}, {1, -1, 1, 1}, 1)
        == "computation_stride must be positive; got computation_stride=[1, -1, 1, 1]");
}

TEST_CASE("build: zero replicas") {
  const auto assignment = device_assignment::build(v3_8(), {1, 1, 1, 2}, {}, 0);
  CHECK(assignment.num_replicas() == 0);
  CHECK(assignment.num_cores_per_replica() == 2);
  CHECK(assignment.core_assignment().empty());
}

// -- build: the ring tiling ----------------------------------------------------------

TEST_CASE("build: four replicas of a chip's two cores fill the v3-8 as a ring") {
  // Shape [1, 1, 1, 2] spans a chip's cores, no stride, 4 = the most
  // replicas: TF's ring. Grid [2, 2, 1, 1]; outer ring_3d(2, 2, 1) =
  // (0,0), (1,0), (1,1), (0,1); inner ring_3d(1, 1, 1) = (0,0,0). So
  // replica 2 is chip (1, 1), devices 6 and 7, where the grid of the
  // 3-replica case put it at (0, 1).
  const auto assignment = device_assignment::build(v3_8(), {1, 1, 1, 2}, {}, 4);
  CHECK(assignment.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}, {0, 0, 0, 1}},
                            {{1, 0, 0, 0}, {1, 0, 0, 1}},
                            {{1, 1, 0, 0}, {1, 1, 0, 1}},
                            {{0, 1, 0, 0}, {0, 1, 0, 1}}});
  CHECK(ordinals(assignment)
        == std::vector<std::vector<std::size_t>>{{0, 1}, {2, 3}, {6, 7}, {4, 5}});
}

TEST_CASE("build: a replica's cores walk the inner ring") {
  // Shape [2, 2, 1, 2], the whole v3-8: 1 replica, the most that fit, a
  // ring. Inner ring_3d(2, 2, 1) = (0,0), (1,0), (1,1), (0,1), both cores
  // of each chip in turn; row-major would visit (0,1) before (1,0).
  const auto assignment = device_assignment::build(v3_8(), {2, 2, 1, 2}, {}, 1);
  CHECK(assignment.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}, {0, 0, 0, 1}, {1, 0, 0, 0}, {1, 0, 0, 1},
                             {1, 1, 0, 0}, {1, 1, 0, 1}, {0, 1, 0, 0}, {0, 1, 0, 1}}});
  CHECK(ordinals(assignment) == std::vector<std::vector<std::size_t>>{{0, 1, 2, 3, 6, 7, 4, 5}});
}

TEST_CASE("build: the ring of a 16-device host") {
  // 16 devices: [4, 2, 1, 2]. Shape [1, 1, 1, 2], 8 replicas: a ring.
  // Outer ring_3d(4, 2, 1) = (0,0), (1,0), (2,0), (3,0), (3,1), (2,1),
  // (1,1), (0,1). Chip (x, y) holds devices 2(4y + x) and 2(4y + x) + 1.
  const auto assignment =
    device_assignment::build(pod_topology::from_devices(cpu_devices(16)), {1, 1, 1, 2}, {}, 8);
  CHECK(ordinals(assignment)
        == std::vector<std::vector<std::size_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7},
                                                 {14, 15}, {12, 13}, {10, 11}, {8, 9}});
  CHECK(assignment.coordinates(4, 1) == mesh_coordinates{3, 1, 0, 1});
}

TEST_CASE("build: the ring across the hosts of a cluster") {
  // 2 hosts of 4 devices: [2, 1, 2, 2]. Shape [1, 1, 1, 2], 4 replicas: a
  // ring. Outer ring_3d(2, 1, 2) = (0,0,0), (1,0,0), (1,0,1), (0,0,1):
  // replicas 0 and 1 on host 0, then 2 and 3 on host 1, back toward x 0.
  cluster_spec cluster;
  cluster.world_size = 2;
  const auto topology = pod_topology::from_cluster(cluster, cpu_devices(4));
  const auto assignment = device_assignment::build(topology, {1, 1, 1, 2}, {}, 4);
  CHECK(ordinals(assignment) == std::vector<std::vector<std::size_t>>{{0, 1}, {2, 3}, {2, 3}, {0, 1}});
  CHECK(assignment.device(2, 0).to_string() == worker(1, "CPU:2"));
  CHECK(assignment.device(3, 1).to_string() == worker(1, "CPU:1"));
  CHECK(assignment.lookup_replicas(0, 0) == std::vector<std::size_t>{0, 1});
  CHECK(assignment.lookup_replicas(1, 1) == std::vector<std::size_t>{2, 3});
}

TEST_CASE("build: replicas of one core fill a cluster host by host") {
  // [2, 1, 2, 2], 8 replicas of one core: no ring (computation_shape[3] = 1).
  // Grid [2, 1, 2, 2], the core fastest, then x, then z: replica r on
  // host r / 4, device r % 4, as the multi-worker strategy numbers them.
  cluster_spec cluster;
  cluster.world_size = 2;
  const auto topology = pod_topology::from_cluster(cluster, cpu_devices(4));
  const auto assignment = device_assignment::build(topology, {}, {}, 8);
  for (std::size_t r = 0; r < 8; ++r) {
    CAPTURE(r);
    CHECK(assignment.device(r).to_string() == worker(static_cast<int>(r / 4), "CPU:" + std::to_string(r % 4)));
    CHECK(assignment.host_device(r).to_string() == worker(static_cast<int>(r / 4), "CPU:0"));
  }
  CHECK(assignment.lookup_replicas(1, 0) == std::vector<std::size_t>{4, 5, 6, 7});
}

TEST_CASE("build: chips of one core take the ring too when the replicas fill the mesh") {
  // TF's rule: computation_shape[3] == mesh_shape[3] (here 1), no stride,
  // full replication. A 2 by 2 mesh of one-core chips: the ring (0,0),
  // (1,0), (1,1), (0,1), where the grid would give (0,1) before (1,1).
  const pod_topology square({2, 2, 1, 1}, {{{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0}, {1, 1, 0, 0}}});
  const auto full = device_assignment::build(square, {}, {}, 4);
  CHECK(ordinals(full) == std::vector<std::vector<std::size_t>>{{0}, {1}, {3}, {2}});
  // Three replicas do not fill it: the grid.
  const auto three = device_assignment::build(square, {}, {}, 3);
  CHECK(ordinals(three) == std::vector<std::vector<std::size_t>>{{0}, {1}, {2}});
}

// -- build: missing devices -----------------------------------------------------------

TEST_CASE("build on a pod with missing devices takes the devices in task order") {
  // [2, 2, 1, 1] with (1, 1) missing; the task's devices in the order
  // (0,1), (1,0), (0,0). Replica r takes device r, whatever the grid.
  const pod_topology holed({2, 2, 1, 1}, {{{0, 1, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}}});
  CHECK(holed.num_missing_devices() == 1);
  const auto three = device_assignment::build(holed, {}, {}, 3);
  CHECK(three.core_assignment()
        == coordinate_table{{{0, 1, 0, 0}}, {{1, 0, 0, 0}}, {{0, 0, 0, 0}}});
  // Two cores per replica: the computation's shape counts only as its
  // product; replica 0 takes devices 0 and 1.
  const auto pair = device_assignment::build(holed, {2, 1, 1, 1}, {}, 1);
  CHECK(pair.core_assignment() == coordinate_table{{{0, 1, 0, 0}, {1, 0, 0, 0}}});

  // Every device is taken: a 4th replica fits the mesh (4 at most) but
  // not the 3 devices.
  CHECK(build_refusal(holed, {}, {}, 4)
        == "requested 4 replicas but only 3 replicas with shape [1, 1, 1, 1] fit on the 3 "
           "devices of a pod mesh of shape [2, 2, 1, 1] with 1 missing devices");
  CHECK(build_refusal(holed, {1, 2, 1, 1}, {}, 2)
        == "requested 2 replicas but only 1 replicas with shape [1, 2, 1, 1] fit on the 3 "
           "devices of a pod mesh of shape [2, 2, 1, 1] with 1 missing devices");
  // TF asserts a stride of ones there.
  CHECK(build_refusal(holed, {}, {1, 2, 1, 1}, 1)
        == "computation_stride must be all ones on a pod with missing devices (its replicas "
           "take the devices in task order); got computation_stride=[1, 2, 1, 1] with 1 "
           "missing devices in a mesh of shape [2, 2, 1, 1]");
  // The mesh's limits come first, as in TF.
  CHECK(build_refusal(holed, {}, {}, 5)
        == "requested 5 replicas but only 4 replicas with shape [1, 1, 1, 1] and "
           "computation_stride [1, 1, 1, 1] fit in a pod mesh of shape [2, 2, 1, 1]");
}

TEST_CASE("build with missing devices across tasks") {
  // [2, 2, 1, 2]: 2 tasks of 2 devices, 4 coordinates missing. Two cores
  // per replica: replica 0 is task 0's devices, replica 1 task 1's.
  const pod_topology sparse({2, 2, 1, 2}, {{{1, 1, 0, 1}, {0, 0, 0, 0}},
                                           {{1, 0, 0, 0}, {0, 1, 0, 1}}});
  const auto assignment = device_assignment::build(sparse, {1, 1, 1, 2}, {}, 2);
  CHECK(assignment.core_assignment()
        == coordinate_table{{{1, 1, 0, 1}, {0, 0, 0, 0}}, {{1, 0, 0, 0}, {0, 1, 0, 1}}});
  CHECK(assignment.lookup_replicas(1, 0) == std::vector<std::size_t>{1});
  CHECK(assignment.device(1, 1).to_string() == worker(1, "CPU:1"));
  CHECK(assignment.device_ordinal(0, 1) == 1);
  // One core per replica: replica 2 is task 1's device 0.
  const auto singles = device_assignment::build(sparse, {}, {}, 4);
  CHECK(singles.coordinates(2, 0) == mesh_coordinates{1, 0, 0, 0});
  CHECK(singles.lookup_replicas(1, 0) == std::vector<std::size_t>{2, 3});
}

// -- build: the device order mode ---------------------------------------------------------

TEST_CASE("device_order_mode has TF's values: AUTO 0, RING 1, MESH 2") {
  CHECK(static_cast<int>(device_order_mode::automatic) == 0);
  CHECK(static_cast<int>(device_order_mode::ring) == 1);
  CHECK(static_cast<int>(device_order_mode::mesh) == 2);
}

TEST_CASE("build: each device order mode on the v3-8, chips of two cores") {
  // Shape [1, 1, 1, 2], 4 replicas, the most: the rings apply. automatic
  // and ring take them (chips (0,0), (1,0), (1,1), (0,1)). mesh takes the
  // grid: replica_counts [2, 2, 1, 1]; axes by (count, key): core (1, 0),
  // z (1, 3), x (2, 1), y (2, 2). core -> 1, z -> 1, x: ceil(4^(1/2)) = 2,
  // 2 left; y: 2. Grid [2, 2, 1, 1], x fastest: replica r at chip
  // (r % 2, r / 2), chip (x, y) holding devices 2(2y + x) and 2(2y + x) + 1.
  const auto topology = v3_8();
  const std::vector<std::vector<std::size_t>> rings{{0, 1}, {2, 3}, {6, 7}, {4, 5}};
  const auto automatic =
    device_assignment::build(topology, {1, 1, 1, 2}, {}, 4, device_order_mode::automatic);
  CHECK(ordinals(automatic) == rings);
  CHECK(automatic == device_assignment::build(topology, {1, 1, 1, 2}, {}, 4));
  const auto ring = device_assignment::build(topology, {1, 1, 1, 2}, {}, 4, device_order_mode::ring);
  CHECK(ordinals(ring) == rings);
  const auto mesh = device_assignment::build(topology, {1, 1, 1, 2}, {}, 4, device_order_mode::mesh);
  CHECK(mesh.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}, {0, 0, 0, 1}},
                            {{1, 0, 0, 0}, {1, 0, 0, 1}},
                            {{0, 1, 0, 0}, {0, 1, 0, 1}},
                            {{1, 1, 0, 0}, {1, 1, 0, 1}}});
  CHECK(ordinals(mesh) == std::vector<std::vector<std::size_t>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
}

TEST_CASE("build: the mesh mode lays a replica's cores row-major, not along the inner ring") {
  // Shape [2, 2, 1, 2], the whole v3-8, 1 replica. automatic and ring: the
  // inner ring_3d(2, 2, 1) = (0,0), (1,0), (1,1), (0,1), devices 0 1 2 3 6
  // 7 4 5. mesh: the shape row-major, the last axis fastest: (0,0,0,c),
  // (0,1,0,c), (1,0,0,c), (1,1,0,c), devices 0 1 4 5 2 3 6 7.
  const auto topology = v3_8();
  const std::vector<std::vector<std::size_t>> inner_ring{{0, 1, 2, 3, 6, 7, 4, 5}};
  CHECK(ordinals(device_assignment::build(topology, {2, 2, 1, 2}, {}, 1,
                                          device_order_mode::automatic))
        == inner_ring);
  CHECK(ordinals(device_assignment::build(topology, {2, 2, 1, 2}, {}, 1, device_order_mode::ring))
        == inner_ring);
  const auto mesh = device_assignment::build(topology, {2, 2, 1, 2}, {}, 1, device_order_mode::mesh);
  CHECK(mesh.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}, {0, 0, 0, 1}, {0, 1, 0, 0}, {0, 1, 0, 1},
                             {1, 0, 0, 0}, {1, 0, 0, 1}, {1, 1, 0, 0}, {1, 1, 0, 1}}});
  CHECK(ordinals(mesh) == std::vector<std::vector<std::size_t>>{{0, 1, 4, 5, 2, 3, 6, 7}});
}

TEST_CASE("build: each device order mode across the hosts of a cluster") {
  // 2 hosts of 4 devices: [2, 1, 2, 2], x and the core within a host, z
  // the host. Shape [1, 1, 1, 2], 4 replicas, the most: automatic and ring
  // take the outer ring_3d(2, 1, 2) = (0,0,0), (1,0,0), (1,0,1), (0,0,1),
  // which comes back to host 1's devices 2 and 3 before 0 and 1. mesh:
  // replica_counts [2, 1, 2, 1]; axes by (count, key): core (1, 0),
  // y (1, 2), x (2, 1), z (2, 3). core -> 1, y -> 1, x: ceil(4^(1/2)) = 2,
  // 2 left; z: 2. Grid [2, 1, 2, 1], x fastest: replica r at x r % 2 on
  // host r / 2, devices 2(r % 2) and 2(r % 2) + 1 there.
  cluster_spec cluster;
  cluster.world_size = 2;
  const auto topology = pod_topology::from_cluster(cluster, cpu_devices(4));
  const std::vector<std::vector<std::size_t>> rings{{0, 1}, {2, 3}, {2, 3}, {0, 1}};
  for (const auto order : {device_order_mode::automatic, device_order_mode::ring}) {
    CAPTURE(static_cast<int>(order));
    const auto assignment = device_assignment::build(topology, {1, 1, 1, 2}, {}, 4, order);
    CHECK(ordinals(assignment) == rings);
    CHECK(assignment.device(3, 0).to_string() == worker(1, "CPU:0"));
  }
  const auto mesh = device_assignment::build(topology, {1, 1, 1, 2}, {}, 4, device_order_mode::mesh);
  CHECK(mesh.core_assignment()
        == coordinate_table{{{0, 0, 0, 0}, {0, 0, 0, 1}},
                            {{1, 0, 0, 0}, {1, 0, 0, 1}},
                            {{0, 0, 1, 0}, {0, 0, 1, 1}},
                            {{1, 0, 1, 0}, {1, 0, 1, 1}}});
  CHECK(ordinals(mesh) == std::vector<std::vector<std::size_t>>{{0, 1}, {2, 3}, {0, 1}, {2, 3}});
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t c = 0; c < 2; ++c) {
      CAPTURE(r);
      CAPTURE(c);
      CHECK(mesh.device(r, c).to_string()
            == worker(static_cast<int>(r / 2), "CPU:" + std::to_string(2 * (r % 2) + c)));
    }
  CHECK(mesh.lookup_replicas(1, 1) == std::vector<std::size_t>{2, 3});
}

TEST_CASE("build: each device order mode on chips of one core") {
  // [2, 2, 1, 1], devices (0,0), (1,0), (0,1), (1,1); 4 one-core replicas
  // fill it. automatic and ring: the ring (0,0), (1,0), (1,1), (0,1);
  // mesh: the grid [2, 2, 1, 1], x fastest, devices in order.
  const pod_topology square({2, 2, 1, 1}, {{{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0}, {1, 1, 0, 0}}});
  const std::vector<std::vector<std::size_t>> ring{{0}, {1}, {3}, {2}};
  CHECK(ordinals(device_assignment::build(square, {}, {}, 4, device_order_mode::automatic)) == ring);
  CHECK(ordinals(device_assignment::build(square, {}, {}, 4, device_order_mode::ring)) == ring);
  CHECK(ordinals(device_assignment::build(square, {}, {}, 4, device_order_mode::mesh))
        == std::vector<std::vector<std::size_t>>{{0}, {1}, {2}, {3}});
}

TEST_CASE("build: where the rings do not apply, automatic and mesh take the grid") {
  // 3 replicas of [1, 1, 1, 2] on the v3-8 do not fill it: the grid
  // [2, 2, 1, 1] (see "three replicas of a chip's two cores"), replica 2
  // on chip (0, 1), whichever of the two modes.
  const auto topology = v3_8();
  const std::vector<std::vector<std::size_t>> grid{{0, 1}, {2, 3}, {4, 5}};
  CHECK(ordinals(device_assignment::build(topology, {1, 1, 1, 2}, {}, 3,
                                          device_order_mode::automatic))
        == grid);
  CHECK(ordinals(device_assignment::build(topology, {1, 1, 1, 2}, {}, 3, device_order_mode::mesh))
        == grid);
  // 8 one-core replicas: computation_shape[3] = 1, not 2; the grid, device r.
  const std::vector<std::vector<std::size_t>> singles{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
  CHECK(ordinals(device_assignment::build(topology, {}, {}, 8, device_order_mode::mesh)) == singles);
  CHECK(ordinals(device_assignment::build(topology, {}, {}, 8, device_order_mode::automatic))
        == singles);
}

TEST_CASE("build: TF's error for the ring mode where the rings do not apply") {
  const auto topology = v3_8();
  // The replicas do not fill the mesh: 3 of 4, or none.
  CHECK(build_refusal(topology, {1, 1, 1, 2}, {}, 3, device_order_mode::ring) == ring_refused);
  CHECK(build_refusal(topology, {1, 1, 1, 2}, {}, 0, device_order_mode::ring) == ring_refused);
  // The computation does not span a chip's cores: computation_shape[3] = 1.
  CHECK(build_refusal(topology, {}, {}, 8, device_order_mode::ring) == ring_refused);
  // A stride: the line [4, 1, 1, 1], shape [2, 1, 1, 1], stride
  // [2, 1, 1, 1], 2 replicas, the most; the chips are of one core.
  const pod_topology line({4, 1, 1, 1},
                          {{{0, 0, 0, 0}, {1, 0, 0, 0}, {2, 0, 0, 0}, {3, 0, 0, 0}}});
  CHECK(build_refusal(line, {2, 1, 1, 1}, {2, 1, 1, 1}, 2, device_order_mode::ring)
        == ring_refused);
  CHECK(device_assignment::build(line, {2, 1, 1, 1}, {2, 1, 1, 1}, 2, device_order_mode::mesh)
        == device_assignment::build(line, {2, 1, 1, 1}, {2, 1, 1, 1}, 2));
  // A mesh of rank 2: [2, 2], 4 replicas of one device, the most.
  const pod_topology flat({2, 2}, {{{0, 0}, {0, 1}, {1, 0}, {1, 1}}});
  CHECK(build_refusal(flat, {}, {}, 4, device_order_mode::ring) == ring_refused);
  CHECK(ordinals(device_assignment::build(flat, {}, {}, 4, device_order_mode::mesh))
        == std::vector<std::vector<std::size_t>>{{0}, {1}, {2}, {3}});
  // The mesh's limits come first, as in TF.
  CHECK(build_refusal(topology, {1, 1, 1, 2}, {}, 5, device_order_mode::ring)
        == "requested 5 replicas but only 4 replicas with shape [1, 1, 1, 2] and "
           "computation_stride [1, 1, 1, 1] fit in a pod mesh of shape [2, 2, 1, 2]");
}

TEST_CASE("build: with missing devices the device order mode plays no part") {
  // As in TF, the task order: replica r takes device r in every mode, and
  // the ring mode is no error though the rings do not apply.
  const pod_topology holed({2, 2, 1, 1}, {{{0, 1, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}}});
  const coordinate_table task_order{{{0, 1, 0, 0}}, {{1, 0, 0, 0}}, {{0, 0, 0, 0}}};
  for (const auto order :
       {device_order_mode::automatic, device_order_mode::ring, device_order_mode::mesh}) {
    CAPTURE(static_cast<int>(order));
    CHECK(device_assignment::build(holed, {}, {}, 3, order).core_assignment() == task_order);
  }
}

TEST_CASE("build: a device order mode that is none of TF's three") {
  // TF would take it as MESH; here it is an error that names it.
  CHECK(build_refusal(v3_8(), {}, {}, 1, static_cast<device_order_mode>(3))
        == "device_order_mode must be device_order_mode::automatic (0), device_order_mode::ring "
           "(1) or device_order_mode::mesh (2); got 3");
}

// -- the ring orders --------------------------------------------------------------------

namespace {

/// True when `ring` visits each chip of an x by y by z block once.
bool covers_block(const std::vector<chip_point>& ring, int x, int y, int z) {
  const std::set<chip_point> chips(ring.begin(), ring.end());
  if (chips.size() != ring.size() || ring.size() != static_cast<std::size_t>(x * y * z))
    return false;
  for (const auto& [a, b, c] : ring)
    if (a < 0 || a >= x || b < 0 || b >= y || c < 0 || c >= z)
      return false;
  return true;
}

/// True when consecutive chips of `ring`, and its last and first, are
/// neighbours: one step along one axis.
bool is_closed_ring(const std::vector<chip_point>& ring) {
  for (std::size_t i = 0; i < ring.size(); ++i) {
    const auto& a = ring[i];
    const auto& b = ring[(i + 1) % ring.size()];
    if (std::abs(a[0] - b[0]) + std::abs(a[1] - b[1]) + std::abs(a[2] - b[2]) != 1)
      return false;
  }
  return true;
}

} // namespace

TEST_CASE("open_ring_2d: TF's figure of a 4 by 4 layer") {
  //    0 -- 1 -- 2 -- 3
  //   15 -- 6 -- 5 -- 4
  //   14 -- 7 -- 8 -- 9
  //   13 -- 12 - 11 - 10      (chip 0 left out)
  CHECK(detail::open_ring_2d(4, 4, 2)
        == std::vector<chip_point>{{1, 0, 2}, {2, 0, 2}, {3, 0, 2}, {3, 1, 2}, {2, 1, 2},
                                   {1, 1, 2}, {1, 2, 2}, {2, 2, 2}, {3, 2, 2}, {3, 3, 2},
                                   {2, 3, 2}, {1, 3, 2}, {0, 3, 2}, {0, 2, 2}, {0, 1, 2}});
}

TEST_CASE("ring_3d: TF's figure of a 4 by 4 by 4 block") {
  const auto ring = detail::ring_3d(4, 4, 4);
  CHECK(covers_block(ring, 4, 4, 4));
  CHECK(is_closed_ring(ring));
  CHECK(ring[0] == chip_point{0, 0, 0});
  CHECK(ring[15] == chip_point{0, 1, 0});
  // Layer z = 1 runs backwards from 16 at (0, 1) to 30 at (1, 0):
  //   63 - 30 - 29 - 28
  //   16 - 25 - 26 - 27
  //   17 - 24 - 23 - 22
  //   18 - 19 - 20 - 21
  CHECK(std::vector<chip_point>(ring.begin() + 16, ring.begin() + 31)
        == std::vector<chip_point>{{0, 1, 1}, {0, 2, 1}, {0, 3, 1}, {1, 3, 1}, {2, 3, 1},
                                   {3, 3, 1}, {3, 2, 1}, {2, 2, 1}, {1, 2, 1}, {1, 1, 1},
                                   {2, 1, 1}, {3, 1, 1}, {3, 0, 1}, {2, 0, 1}, {1, 0, 1}});
  // Layer z = 2 forwards from 31 at (1, 0); then down the z axis at (0, 0):
  // 61 at z 3, 62 at z 2, 63 at z 1.
  CHECK(ring[31] == chip_point{1, 0, 2});
  CHECK(ring[45] == chip_point{0, 1, 2});
  CHECK(ring[46] == chip_point{0, 1, 3});
  CHECK(ring[60] == chip_point{1, 0, 3});
  CHECK(std::vector<chip_point>(ring.begin() + 61, ring.end())
        == std::vector<chip_point>{{0, 0, 3}, {0, 0, 2}, {0, 0, 1}});
}

TEST_CASE("ring_3d: lines, flat rings and odd sizes") {
  CHECK(detail::ring_3d(1, 1, 1) == std::vector<chip_point>{{0, 0, 0}});
  CHECK(detail::ring_3d(1, 1, 3) == std::vector<chip_point>{{0, 0, 0}, {0, 0, 1}, {0, 0, 2}});
  CHECK(detail::ring_3d(1, 3, 1) == std::vector<chip_point>{{0, 0, 0}, {0, 1, 0}, {0, 2, 0}});
  CHECK(detail::ring_3d(5, 1, 1).back() == chip_point{4, 0, 0});
  CHECK(detail::ring_3d(2, 2, 1)
        == std::vector<chip_point>{{0, 0, 0}, {1, 0, 0}, {1, 1, 0}, {0, 1, 0}});
  // One size of 1: the flat ring of the others, in their plane.
  CHECK(detail::ring_3d(2, 1, 2)
        == std::vector<chip_point>{{0, 0, 0}, {1, 0, 0}, {1, 0, 1}, {0, 0, 1}});
  CHECK(detail::ring_3d(1, 2, 2)
        == std::vector<chip_point>{{0, 0, 0}, {0, 1, 0}, {0, 1, 1}, {0, 0, 1}});
  for (const auto& block : std::vector<chip_point>{{4, 2, 1}, {2, 4, 2}, {6, 1, 4}, {1, 2, 8}}) {
    CAPTURE(block[0]);
    CAPTURE(block[1]);
    CAPTURE(block[2]);
    const auto ring = detail::ring_3d(block[0], block[1], block[2]);
    CHECK(covers_block(ring, block[0], block[1], block[2]));
    CHECK(is_closed_ring(ring));
  }
  // An odd size above 1: no ring, row-major with x fastest.
  CHECK(detail::ring_3d(3, 2, 1)
        == std::vector<chip_point>{{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {0, 1, 0}, {1, 1, 0}, {2, 1, 0}});
  CHECK(covers_block(detail::ring_3d(2, 3, 2), 2, 3, 2));
}

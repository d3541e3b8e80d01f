// pod_topology: explicit topologies and every error of their checks, the
// lookups by coordinates, the meshes of this process's devices and of a
// cluster (worked out by hand below), and initialize_pod_system. No actor
// system. Suite 'unit'.

#include "lockstep/pod_topology.hpp"

#include "lockstep/error.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using namespace lockstep;

namespace {

const std::string local = "/job:localhost/replica:0/task:0/device:";

std::string worker(int task, const std::string& device) {
  return "/job:worker/replica:0/task:" + std::to_string(task) + "/device:" + device;
}

/// The value_error's message for constructing a topology from `mesh` and
/// `coordinates`.
std::string refusal(const mesh_coordinates& mesh, const coordinate_table& coordinates) {
  return error_of<value_error>([&] { (void)pod_topology(mesh, coordinates); });
}

std::string refusal(const mesh_coordinates& mesh, const coordinate_table& coordinates,
                    const std::vector<std::vector<device_spec>>& devices) {
  return error_of<value_error>([&] { (void)pod_topology(mesh, coordinates, devices); });
}

const std::string not_rank_3 = "`device_coordinates` must be a rank 3 array with minor "
                               "dimension equal to the mesh shape rank (4); got ";

} // namespace

// -- explicit topologies ------------------------------------------------------

TEST_CASE("an explicit topology of two tasks: its properties and lookups") {
  const pod_topology topology({2, 1, 1, 2}, {{{0, 0, 0, 0}, {0, 0, 0, 1}},
                                             {{1, 0, 0, 0}, {1, 0, 0, 1}}});
  CHECK(topology.mesh_shape() == mesh_coordinates{2, 1, 1, 2});
  CHECK(topology.mesh_rank() == 4);
  CHECK(topology.num_tasks() == 2);
  CHECK(topology.num_devices_per_task() == 2);
  CHECK(topology.num_devices() == 4);
  CHECK(topology.missing_devices().empty());
  CHECK(topology.device_coordinates(1, 0) == mesh_coordinates{1, 0, 0, 0});
  CHECK(topology.device_coordinates()[0][1] == mesh_coordinates{0, 0, 0, 1});

  CHECK(topology.task_ordinal_at_coordinates({1, 0, 0, 1}) == 1);
  CHECK(topology.device_ordinal_at_coordinates({1, 0, 0, 1}) == 1);
  CHECK(topology.task_ordinal_at_coordinates({0, 0, 0, 1}) == 0);
  CHECK(topology.device_ordinal_at_coordinates({1, 0, 0, 0}) == 0);
  // Several tasks without names: /job:worker, task by task.
  CHECK(topology.device_at_coordinates({1, 0, 0, 1}).to_string() == worker(1, "CPU:1"));
  CHECK(topology.host_device_at_coordinates({1, 0, 0, 1}).to_string() == worker(1, "CPU:0"));
  CHECK(topology.device(0, 1).to_string() == worker(0, "CPU:1"));
  CHECK(topology.host_device(1).to_string() == worker(1, "CPU:0"));
  CHECK(topology.has_device_at({1, 0, 0, 1}));
  CHECK_FALSE(topology.has_device_at({2, 0, 0, 0}));
  CHECK_FALSE(topology.has_device_at({0, 0, 0}));
  CHECK_FALSE(topology.has_device_at({0, -1, 0, 0}));
}

TEST_CASE("one task without names: this process's CPU devices") {
  const pod_topology topology({1, 1, 1, 2}, {{{0, 0, 0, 1}, {0, 0, 0, 0}}});
  CHECK(topology.device(0, 0).to_string() == local + "CPU:0");
  CHECK(topology.device(0, 1).to_string() == local + "CPU:1");
  // Device 0 sits at core 1: the lookups follow the coordinates given.
  CHECK(topology.device_at_coordinates({0, 0, 0, 1}).to_string() == local + "CPU:0");
  CHECK(topology.device_ordinal_at_coordinates({0, 0, 0, 0}) == 1);
  CHECK(topology.host_device(0).to_string() == local + "CPU:0");
}

TEST_CASE("missing devices: the coordinates without one, row-major") {
  const pod_topology topology({2, 2, 1, 1}, {{{0, 1, 0, 0}}});
  // Row-major over [2, 2, 1, 1]: (0,0), (0,1), (1,0), (1,1); (0,1) holds a device.
  CHECK(topology.missing_devices()
        == std::vector<mesh_coordinates>{{0, 0, 0, 0}, {1, 0, 0, 0}, {1, 1, 0, 0}});
  CHECK_FALSE(topology.has_device_at({1, 1, 0, 0}));
  CHECK(topology.has_device_at({0, 1, 0, 0}));
  const auto missing = "pod_topology: no device at coordinates [1, 1, 0, 0]: it is one of the "
                       "pod's missing devices";
  CHECK(error_of<value_error>([&] { topology.task_ordinal_at_coordinates({1, 1, 0, 0}); })
        == missing);
  CHECK(error_of<value_error>([&] { topology.device_ordinal_at_coordinates({1, 1, 0, 0}); })
        == missing);
  CHECK(error_of<value_error>([&] { topology.device_at_coordinates({1, 1, 0, 0}); })
        == missing);
  CHECK(error_of<value_error>([&] { topology.host_device_at_coordinates({1, 1, 0, 0}); })
        == missing);
}

TEST_CASE("meshes of other ranks") {
  SUBCASE("rank 1") {
    const pod_topology line({3}, {{{2}, {0}, {1}}});
    CHECK(line.mesh_rank() == 1);
    CHECK(line.device_ordinal_at_coordinates({2}) == 0);
    CHECK(line.device_ordinal_at_coordinates({0}) == 1);
    CHECK(line.missing_devices().empty());
  }
  SUBCASE("rank 2, two tasks, one coordinate missing") {
    const pod_topology grid({2, 3}, {{{0, 0}, {0, 1}}, {{1, 2}, {1, 0}}});
    CHECK(grid.mesh_rank() == 2);
    CHECK(grid.task_ordinal_at_coordinates({1, 0}) == 1);
    CHECK(grid.device_ordinal_at_coordinates({1, 0}) == 1);
    CHECK(grid.missing_devices() == std::vector<mesh_coordinates>{{0, 2}, {1, 1}});
  }
}

TEST_CASE("explicit names: canonical, one host per task") {
  const pod_topology topology(
    {1, 1, 2, 1}, {{{0, 0, 0, 0}}, {{0, 0, 1, 0}}},
    {{device_spec::parse("/job:chief/task:0/device:GPU:0")},
     {device_spec::parse("/job:worker/task:0/gpu:1")}});
  CHECK(topology.device(0, 0).to_string() == "/job:chief/replica:0/task:0/device:GPU:0");
  CHECK(topology.device(1, 0).to_string() == worker(0, "GPU:1"));
  CHECK(topology.host_device(1).to_string() == worker(0, "CPU:0"));
  CHECK(topology.host_device_at_coordinates({0, 0, 0, 0}).to_string()
        == "/job:chief/replica:0/task:0/device:CPU:0");
}

TEST_CASE("equal topologies compare equal") {
  const pod_topology a({2, 1, 1, 1}, {{{0, 0, 0, 0}, {1, 0, 0, 0}}});
  CHECK(a == pod_topology({2, 1, 1, 1}, {{{0, 0, 0, 0}, {1, 0, 0, 0}}}));
  CHECK_FALSE(a == pod_topology({2, 1, 1, 1}, {{{1, 0, 0, 0}, {0, 0, 0, 0}}}));
  CHECK_FALSE(a == pod_topology({2, 1, 1, 1}, {{{0, 0, 0, 0}}, {{1, 0, 0, 0}}}));
}

// -- the checks -----------------------------------------------------------------

TEST_CASE("a mesh shape must be a non-empty sequence of positive entries, not too large") {
  const coordinate_table one{{{0}}};
  CHECK(refusal({}, one) == "`mesh_shape` must be a sequence of positive entries; got []");
  CHECK(refusal({2, 0, 1, 1}, one)
        == "`mesh_shape` must be a sequence of positive entries; got [2, 0, 1, 1]");
  CHECK(refusal({2, -1, 1, 1}, one)
        == "`mesh_shape` must be a sequence of positive entries; got [2, -1, 1, 1]");
  // 2048 · 2048 · 2 = 8,388,608 coordinates, twice max_pod_mesh_size.
  CHECK(refusal({2048, 2048, 2}, one)
        == "pod_topology: a mesh of shape [2048, 2048, 2] has more than max_pod_mesh_size "
           "(4194304) coordinates");
  // The largest allowed: [2048, 2048] is exactly max_pod_mesh_size.
  const pod_topology largest({2048, 2048}, {{{2047, 2047}}});
  CHECK(largest.num_missing_devices() == max_pod_mesh_size - 1);
  CHECK(largest.device_ordinal_at_coordinates({2047, 2047}) == 0);
}

TEST_CASE("device coordinates must be a rank 3 table whose minor dimension is the mesh's rank") {
  const mesh_coordinates mesh{2, 1, 1, 2};
  CHECK(refusal(mesh, {}) == not_rank_3 + "shape [0]");
  CHECK(refusal(mesh, {{}}) == not_rank_3 + "shape [1, 0]");
  CHECK(refusal(mesh, {{}, {}}) == not_rank_3 + "shape [2, 0]");
  // Ragged tasks: every task must have the same number of devices.
  CHECK(refusal(mesh, {{{0, 0, 0, 0}, {0, 0, 0, 1}}, {{1, 0, 0, 0}}})
        == not_rank_3 + "a ragged array: task 1 has 1 devices, task 0 has 2");
  CHECK(refusal(mesh, {{{0, 0, 0, 0}}, {}})
        == not_rank_3 + "a ragged array: task 1 has 0 devices, task 0 has 1");
  CHECK(refusal(mesh, {{{0, 0, 0, 0}, {0, 0, 1}}})
        == not_rank_3 + "a ragged array: task 0 device 1 has 3 coordinates, task 0 device 0 has 4");
  CHECK(refusal(mesh, {{{0, 0, 0}, {0, 0, 1}}}) == not_rank_3 + "shape [1, 2, 3]");
}

TEST_CASE("device coordinates must lie in the mesh, one device at each") {
  CHECK(refusal({2, 1, 1, 1}, {{{0, 0, 0, 0}, {2, 0, 0, 0}}})
        == "pod_topology: task 0 device 1 is at [2, 0, 0, 0], outside the mesh of shape "
           "[2, 1, 1, 1]");
  CHECK(refusal({2, 1, 1, 1}, {{{0, 0, 0, 0}}, {{0, 0, -1, 0}}})
        == "pod_topology: task 1 device 0 is at [0, 0, -1, 0], outside the mesh of shape "
           "[2, 1, 1, 1]");
  CHECK(refusal({2, 1, 1, 2}, {{{0, 0, 0, 0}, {1, 0, 0, 1}}, {{1, 0, 0, 1}, {0, 0, 0, 1}}})
        == "pod_topology: task 1 device 0 is at [1, 0, 0, 1], as is task 0 device 1");
}

TEST_CASE("explicit names must name each device once, each task on its own host") {
  const mesh_coordinates mesh{2, 1, 1, 2};
  const coordinate_table two_by_two{{{0, 0, 0, 0}, {0, 0, 0, 1}}, {{1, 0, 0, 0}, {1, 0, 0, 1}}};
  const auto d = [](const std::string& text) { return device_spec::parse(text); };
  CHECK(refusal(mesh, two_by_two, {{d(worker(0, "CPU:0")), d(worker(0, "CPU:1"))}})
        == "pod_topology: `devices` must name every device of `device_coordinates` [2][2]; got "
           "names for 1 tasks");
  CHECK(refusal(mesh, two_by_two,
                {{d(worker(0, "CPU:0")), d(worker(0, "CPU:1"))}, {d(worker(1, "CPU:0"))}})
        == "pod_topology: `devices` must name every device of `device_coordinates` [2][2]; got "
           "1 names for task 1");
  CHECK(refusal(mesh, two_by_two,
                {{d(worker(0, "CPU:0")), d(worker(1, "CPU:1"))},
                 {d(worker(1, "CPU:0")), d(worker(1, "CPU:2"))}})
        == "pod_topology: the devices of task 0 must be on one host, but "
           + worker(0, "CPU:0") + " and " + worker(1, "CPU:1") + " are not");
  CHECK(refusal(mesh, two_by_two,
                {{d(worker(0, "CPU:0")), d(worker(0, "CPU:1"))},
                 {d(worker(0, "CPU:2")), d(worker(0, "CPU:3"))}})
        == "pod_topology: tasks 0 and 1 are both on host /job:worker/replica:0/task:0");
  // "/cpu:1" and "/device:CPU:1" are one device once canonical.
  CHECK(refusal({1, 1, 1, 2}, {{{0, 0, 0, 0}, {0, 0, 0, 1}}}, {{d("/cpu:1"), d("/device:CPU:1")}})
        == "pod_topology: task 0 names " + local + "CPU:1 twice (devices 0 and 1)");
}

TEST_CASE("lookups name what is out of range") {
  const pod_topology topology({2, 1, 1, 1}, {{{0, 0, 0, 0}, {1, 0, 0, 0}}});
  CHECK(error_of<value_error>([&] { topology.task_ordinal_at_coordinates({0, 0, 0}); })
        == "pod_topology: coordinates [0, 0, 0] have 3 entries; the mesh has rank 4");
  CHECK(error_of<value_error>([&] { topology.device_at_coordinates({2, 0, 0, 0}); })
        == "pod_topology: coordinates [2, 0, 0, 0] lie outside the mesh of shape [2, 1, 1, 1]");
  CHECK(error_of<value_error>([&] { topology.device_ordinal_at_coordinates({0, 0, 0, -1}); })
        == "pod_topology: coordinates [0, 0, 0, -1] lie outside the mesh of shape [2, 1, 1, 1]");
  CHECK(error_of<value_error>([&] { topology.device(1, 0); })
        == "pod_topology: task 1 is out of range: the pod has 1 tasks");
  CHECK(error_of<value_error>([&] { topology.host_device(3); })
        == "pod_topology: task 3 is out of range: the pod has 1 tasks");
  CHECK(error_of<value_error>([&] { topology.device_coordinates(0, 2); })
        == "pod_topology: device 2 is out of range: each task has 2 devices");
}

// -- this process's devices -----------------------------------------------------

TEST_CASE("from_devices: eight CPU devices form TF's v3-8 mesh") {
  const auto topology = pod_topology::from_devices(cpu_devices(8));
  CHECK(topology.mesh_shape() == mesh_coordinates{2, 2, 1, 2});
  CHECK(topology.num_tasks() == 1);
  CHECK(topology.num_devices_per_task() == 8);
  CHECK(topology.missing_devices().empty());
  // The core fastest, then x, then y.
  CHECK(topology.device_coordinates()
        == coordinate_table{{{0, 0, 0, 0}, {0, 0, 0, 1}, {1, 0, 0, 0}, {1, 0, 0, 1},
                             {0, 1, 0, 0}, {0, 1, 0, 1}, {1, 1, 0, 0}, {1, 1, 0, 1}}});
  for (int d = 0; d < 8; ++d)
    CHECK(topology.device(0, static_cast<std::size_t>(d)) == cpu_device(d));
  CHECK(topology.device_at_coordinates({1, 1, 0, 0}).to_string() == local + "CPU:6");
  CHECK(topology.host_device(0).to_string() == local + "CPU:0");
}

TEST_CASE("from_devices: the host mesh of N devices") {
  // Cores per chip: 2 for an even N, else 1; chips in the most nearly
  // square x by y grid with x >= y.
  const std::vector<std::pair<int, mesh_coordinates>> cases{
    {1, {1, 1, 1, 1}},  {2, {1, 1, 1, 2}},  {3, {3, 1, 1, 1}},  {4, {2, 1, 1, 2}},
    {6, {3, 1, 1, 2}},  {7, {7, 1, 1, 1}},  {9, {3, 3, 1, 1}},  {12, {3, 2, 1, 2}},
    {16, {4, 2, 1, 2}}, {18, {3, 3, 1, 2}}, {32, {4, 4, 1, 2}}, {15, {5, 3, 1, 1}}};
  for (const auto& one : cases) {
    const int count = one.first;
    CAPTURE(count);
    const auto topology = pod_topology::from_devices(cpu_devices(count));
    CHECK(topology.mesh_shape() == one.second);
    CHECK(topology.num_devices() == static_cast<std::size_t>(count));
    CHECK(topology.missing_devices().empty());
  }
  // 12 devices, [3, 2, 1, 2]: device 9 is core 1 of chip 4, at x 1, y 1.
  CHECK(pod_topology::from_devices(cpu_devices(12)).device_coordinates(0, 9)
        == mesh_coordinates{1, 1, 0, 1});
}

TEST_CASE("from_devices: GPUs and devices in any order keep their names") {
  const auto topology = pod_topology::from_devices(
    {device_spec::parse("/gpu:1"), device_spec::parse("/gpu:0"), device_spec::parse("/cpu:3")});
  CHECK(topology.mesh_shape() == mesh_coordinates{3, 1, 1, 1});
  CHECK(topology.device(0, 0).to_string() == local + "GPU:1");
  CHECK(topology.device(0, 1).to_string() == local + "GPU:0");
  CHECK(topology.device_at_coordinates({2, 0, 0, 0}).to_string() == local + "CPU:3");
}

TEST_CASE("from_devices refuses no devices, another task's, and one twice") {
  CHECK(error_of<value_error>([] { pod_topology::from_devices({}); })
        == "pod_topology::from_devices: no devices");
  CHECK(error_of<value_error>([] {
          pod_topology::from_devices({cpu_device(0), device_spec::parse("/job:worker/task:1/cpu:0")});
        })
        == "pod_topology::from_devices: the devices must be this process's (" + local
             + "CPU:0 and its like), not /job:worker/task:1/device:CPU:0");
  CHECK(error_of<value_error>([] {
          pod_topology::from_devices({device_spec::parse("/cpu:0"), cpu_device(1), cpu_device(0)});
        })
        == "pod_topology: task 0 names " + local + "CPU:0 twice (devices 0 and 2)");
}

// -- a cluster ------------------------------------------------------------------

namespace {

cluster_spec cluster_of(std::size_t world_size, std::size_t rank, std::string task_type = {},
                        std::size_t task_index = 0) {
  cluster_spec spec;
  spec.world_size = world_size;
  spec.rank = rank;
  spec.task_type = std::move(task_type);
  spec.task_index = task_index;
  return spec;
}

} // namespace

TEST_CASE("from_cluster: hosts stacked along z, named by rank") {
  const auto topology = pod_topology::from_cluster(cluster_of(2, 1), cpu_devices(4));
  CHECK(topology.mesh_shape() == mesh_coordinates{2, 1, 2, 2});
  CHECK(topology.num_tasks() == 2);
  CHECK(topology.num_devices_per_task() == 4);
  CHECK(topology.device_coordinates()
        == coordinate_table{{{0, 0, 0, 0}, {0, 0, 0, 1}, {1, 0, 0, 0}, {1, 0, 0, 1}},
                            {{0, 0, 1, 0}, {0, 0, 1, 1}, {1, 0, 1, 0}, {1, 0, 1, 1}}});
  CHECK(topology.device(0, 3).to_string() == worker(0, "CPU:3"));
  CHECK(topology.device(1, 2).to_string() == worker(1, "CPU:2"));
  CHECK(topology.device_at_coordinates({1, 0, 1, 1}).to_string() == worker(1, "CPU:3"));
  CHECK(topology.host_device_at_coordinates({1, 0, 1, 1}).to_string() == worker(1, "CPU:0"));
  // Every worker computes the same topology.
  CHECK(topology == pod_topology::from_cluster(cluster_of(2, 0), cpu_devices(4)));
}

TEST_CASE("from_cluster: TF_CONFIG's chief is /job:chief, its workers /job:worker from 0") {
  const auto expect = [](const pod_topology& topology) {
    CHECK(topology.mesh_shape() == mesh_coordinates{1, 1, 3, 1});
    CHECK(topology.device(0, 0).to_string() == "/job:chief/replica:0/task:0/device:GPU:1");
    CHECK(topology.device(1, 0).to_string() == worker(0, "GPU:1"));
    CHECK(topology.device(2, 0).to_string() == worker(1, "GPU:1"));
  };
  const std::vector<device_spec> gpu1{device_spec::parse("/gpu:1")};
  expect(pod_topology::from_cluster(cluster_of(3, 0, "chief", 0), gpu1));
  expect(pod_topology::from_cluster(cluster_of(3, 1, "worker", 0), gpu1));
  expect(pod_topology::from_cluster(cluster_of(3, 2, "worker", 1), gpu1));
  // Without a chief, TF_CONFIG's worker i is rank i.
  const auto no_chief = pod_topology::from_cluster(cluster_of(3, 1, "worker", 1), gpu1);
  CHECK(no_chief.device(0, 0).to_string() == worker(0, "GPU:1"));
  CHECK(no_chief.device(2, 0).to_string() == worker(2, "GPU:1"));
}

TEST_CASE("from_cluster: one process or an evaluator is from_devices") {
  CHECK(pod_topology::from_cluster(cluster_of(1, 0), cpu_devices(4))
        == pod_topology::from_devices(cpu_devices(4)));
  CHECK(pod_topology::from_cluster(cluster_of(3, 0, "evaluator", 0), cpu_devices(2))
        == pod_topology::from_devices(cpu_devices(2)));
}

TEST_CASE("from_cluster checks this worker's devices and the pod's size") {
  CHECK(error_of<value_error>([] { pod_topology::from_cluster(cluster_of(2, 0), {}); })
        == "pod_topology::from_cluster: no devices");
  CHECK(error_of<value_error>([] {
          pod_topology::from_cluster(cluster_of(2, 0), {device_spec::parse("/job:worker/task:1/cpu:0")});
        })
        == "pod_topology::from_cluster: the devices must be this process's (" + local
             + "CPU:0 and its like), not /job:worker/task:1/device:CPU:0");
  CHECK(error_of<value_error>([] {
          pod_topology::from_cluster(cluster_of(2, 0), {cpu_device(1), cpu_device(1)});
        })
        == "pod_topology: task 0 names " + worker(0, "CPU:1") + " twice (devices 0 and 1)");
  CHECK(error_of<value_error>([] { pod_topology::from_cluster(cluster_of(65536, 0), cpu_devices(128)); })
        == "pod_topology::from_cluster: 65536 hosts of 128 devices are more than a pod's mesh "
           "may hold (max_pod_mesh_size, 4194304)");
}

// -- initialize_pod_system ------------------------------------------------------

TEST_CASE("initialize_pod_system: the metadata of a TF_CONFIG cluster") {
  const cluster_resolver resolver(
    {}, {{"TF_CONFIG", R"({"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2223"]},)"
                       R"("task": {"type": "worker", "index": 1}})"}});
  const auto metadata = initialize_pod_system(resolver, cpu_devices(2));
  CHECK(metadata.num_hosts == 3);
  CHECK(metadata.num_devices_per_host == 2);
  CHECK(metadata.num_cores == 6);
  CHECK(metadata.host == 2);
  CHECK(metadata.topology.mesh_shape() == mesh_coordinates{1, 1, 3, 2});
  CHECK(metadata.topology == pod_topology::from_cluster(resolver.spec(), cpu_devices(2)));
  std::vector<std::string> names;
  for (const auto& d : metadata.devices)
    names.push_back(d.to_string());
  CHECK(names
        == std::vector<std::string>{"/job:chief/replica:0/task:0/device:CPU:0",
                                    "/job:chief/replica:0/task:0/device:CPU:1",
                                    worker(0, "CPU:0"), worker(0, "CPU:1"), worker(1, "CPU:0"),
                                    worker(1, "CPU:1")});
}

TEST_CASE("initialize_pod_system: one process without a GPU is one CPU device") {
  // The unit suite hides every CUDA device, so the default is /cpu:0.
  const auto metadata = initialize_pod_system(cluster_resolver({}, {{"HOME", "/root"}}));
  CHECK(metadata.num_hosts == 1);
  CHECK(metadata.num_devices_per_host == 1);
  CHECK(metadata.num_cores == 1);
  CHECK(metadata.host == 0);
  CHECK(metadata.topology.mesh_shape() == mesh_coordinates{1, 1, 1, 1});
  REQUIRE(metadata.devices.size() == 1);
  CHECK(metadata.devices[0].to_string() == local + "CPU:0");
}

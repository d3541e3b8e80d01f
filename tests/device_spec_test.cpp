#include "lockstep/device_spec.hpp"

#include <doctest/doctest.h>

#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "devices/local_task.hpp"
#include "lockstep/error.hpp"

using namespace lockstep;

namespace {

const std::string local_cpu0 = "/job:localhost/replica:0/task:0/device:CPU:0";

// The message of the value_error that parsing `text` throws.
std::string parse_error(const std::string& text) {
  try {
    device_spec::parse(text);
  } catch (const value_error& e) {
    return e.what();
  }
  FAIL("parsing '" << text << "' did not throw");
  return {};
}

} // namespace

TEST_CASE("a full device string sets every field") {
  auto spec = device_spec::parse("/job:worker/replica:0/task:1/device:GPU:0");
  CHECK(spec.job() == "worker");
  CHECK(spec.replica() == 0);
  CHECK(spec.task() == 1);
  CHECK(spec.device_type() == "GPU");
  CHECK(spec.device_index() == 0);
  CHECK(spec.to_string() == "/job:worker/replica:0/task:1/device:GPU:0");
}

TEST_CASE("an empty string sets nothing") {
  auto spec = device_spec::parse("");
  CHECK(spec == device_spec{});
  CHECK_FALSE(spec.job());
  CHECK_FALSE(spec.replica());
  CHECK_FALSE(spec.task());
  CHECK_FALSE(spec.device_type());
  CHECK_FALSE(spec.device_index());
  CHECK(spec.to_string() == "");
  CHECK(device_spec::parse("/") == device_spec{});
}

TEST_CASE("partial device strings set only their fields") {
  SUBCASE("job only") {
    auto spec = device_spec::parse("/job:localhost");
    CHECK(spec.job() == "localhost");
    CHECK_FALSE(spec.task());
    CHECK_FALSE(spec.device_type());
    CHECK(spec.to_string() == "/job:localhost");
  }
  SUBCASE("short cpu form") {
    auto spec = device_spec::parse("/cpu:0");
    CHECK_FALSE(spec.job());
    CHECK(spec.device_type() == "CPU");
    CHECK(spec.device_index() == 0);
    CHECK(spec.to_string() == "/device:CPU:0");
  }
  SUBCASE("device: form") {
    auto spec = device_spec::parse("/device:CPU:1");
    CHECK(spec.device_type() == "CPU");
    CHECK(spec.device_index() == 1);
  }
  SUBCASE("no leading slash") {
    CHECK(device_spec::parse("CPU:1").to_string() == "/device:CPU:1");
    CHECK(device_spec::parse("GPU:1").to_string() == "/device:GPU:1");
    CHECK(device_spec::parse("job:w/task:2").to_string() == "/job:w/task:2");
  }
  SUBCASE("components in any order, empty ones skipped") {
    CHECK(device_spec::parse("/device:GPU:3//task:2/job:w/").to_string()
          == "/job:w/task:2/device:GPU:3");
  }
  SUBCASE("an unset index prints as *") {
    auto bare = device_spec::parse("/GPU");
    CHECK(bare.device_type() == "GPU");
    CHECK_FALSE(bare.device_index());
    CHECK(bare.to_string() == "/device:GPU:*");
    CHECK(device_spec::parse("/gpu:*") == bare);
    CHECK(device_spec::parse("/device:GPU:*") == bare);
  }
}

TEST_CASE("device types are upper-cased, whatever their case") {
  for (const char* text : {"/cpu:0", "/CPU:0", "/Cpu:0", "/device:cpu:0", "/device:CPU:0"})
    CHECK(device_spec::parse(text) == device_spec::parse("/device:CPU:0"));
  for (const char* text : {"/gpu:2", "/GPU:2", "gpu:2", "/device:gpu:2"})
    CHECK(device_spec::parse(text).device_type() == "GPU");
  CHECK(device_spec::parse("/tpu:1").device_type() == "TPU");
  CHECK(device_spec::parse("/device:xla_cpu:0").device_type() == "XLA_CPU");
}

TEST_CASE("canonical() fills in TF's defaults") {
  for (const char* text : {"", "/cpu:0", "/CPU:0", "/job:localhost", "/device:CPU:0",
                           "/job:localhost/replica:0/task:0/device:CPU:0", "/CPU"})
    CHECK(device_spec::parse(text).canonical().to_string() == local_cpu0);
  CHECK(device_spec::parse("/gpu:1").canonical().to_string()
        == "/job:localhost/replica:0/task:0/device:GPU:1");
  CHECK(device_spec::parse("/job:worker/task:3").canonical().to_string()
        == "/job:worker/replica:0/task:3/device:CPU:0");
  CHECK(device_spec::parse("/cpu:0").canonical() == cpu_device(0));
}

TEST_CASE("to_string() round-trips through parse()") {
  for (const char* text : {"", "/job:localhost", "/job:worker/replica:0/task:1/device:GPU:0",
                           "/replica:2", "/task:7/device:CPU:3", "/device:GPU:*",
                           "/job:ps_1/task:12"}) {
    CAPTURE(text);
    auto spec = device_spec::parse(text);
    CHECK(spec.to_string() == text);
    CHECK(device_spec::parse(spec.to_string()) == spec);
  }
}

TEST_CASE("implicit construction from strings parses") {
  device_spec from_literal = "/gpu:1";
  device_spec from_string = std::string("/device:GPU:1");
  CHECK(from_literal == from_string);
  CHECK(from_literal.device_index() == 1);
}

TEST_CASE("is_local, is_gpu and is_cpu") {
  CHECK(device_spec::parse("").is_local());
  CHECK(device_spec::parse("/job:localhost/cpu:0").is_local());
  CHECK_FALSE(device_spec::parse("/job:worker/task:0").is_local());

  CHECK(device_spec::parse("/gpu:0").is_gpu());
  CHECK_FALSE(device_spec::parse("/gpu:0").is_cpu());
  CHECK(device_spec::parse("/cpu:0").is_cpu());
  CHECK_FALSE(device_spec::parse("/cpu:0").is_gpu());
  CHECK(device_spec::parse("/job:worker").is_cpu());
  CHECK_FALSE(device_spec::parse("/tpu:0").is_cpu());
  CHECK_FALSE(device_spec::parse("/tpu:0").is_gpu());
}

TEST_CASE("specs are ordered and usable as map keys") {
  std::map<device_spec, int> by_device;
  by_device[cpu_device(1)] = 1;
  by_device[cpu_device(0)] = 0;
  by_device["/job:localhost/replica:0/task:0/device:CPU:1"] = 11;
  REQUIRE(by_device.size() == 2);
  CHECK(by_device.begin()->first == cpu_device(0));
  CHECK(by_device[cpu_device(1)] == 11);
  CHECK(cpu_device(0) < cpu_device(1));
  CHECK(device_spec{} < cpu_device(0));
}

TEST_CASE("operator<< writes to_string()") {
  std::ostringstream out;
  out << device_spec::parse("/job:w/gpu:1");
  CHECK(out.str() == "/job:w/device:GPU:1");
}

TEST_CASE("malformed device strings throw value_error quoting the text") {
  CHECK(parse_error("/foo:1") == "Unknown attribute: 'foo' in '/foo:1'");
  CHECK(parse_error("/job:w/bar") == "Unknown attribute: 'bar' in '/job:w/bar'");
  CHECK(parse_error("/replica:x")
        == "Malformed device string '/replica:x': replica index 'x' is not a non-negative integer");
  CHECK(parse_error("/task:-1")
        == "Malformed device string '/task:-1': task index '-1' is not a non-negative integer");
  CHECK(parse_error("/job:")
        == "Malformed device string '/job:': job name '' must be a letter followed by letters, "
           "digits or '_'");
  CHECK(parse_error("/job:a/job:b")
        == "Malformed device string '/job:a/job:b': the job is given twice");
  CHECK(parse_error("/cpu:0/device:GPU:0")
        == "Malformed device string '/cpu:0/device:GPU:0': the device is given twice");
  CHECK(parse_error("/device:GPU")
        == "Malformed device string '/device:GPU': component 'device:GPU' is not of the form "
           "device:<type>:<index>");

  // Each of these must name the whole offending string.
  for (const std::string text :
       {"/job:worker/replica:0/task:one", "/gpu:1.5", "/gpu:", "/gpu:+1", "/gpu:0:1",
        "/device:GPU:-2", "/device::0", "/job:1worker", "/job:a b", "/replica:0/replica:1",
        "/task:1/task:1", "/task:99999999999", "/replica", "/ cpu:0", "/foo"}) {
    CAPTURE(text);
    CHECK(parse_error(text).find("'" + text + "'") != std::string::npos);
  }
  CHECK_THROWS_AS(device_spec("/foo:1"), value_error);
  CHECK_THROWS_WITH_AS(device_spec::parse("/cpu:x"),
                       doctest::Contains("'/cpu:x'"), value_error);
}

TEST_CASE("cpu_device and cpu_devices") {
  CHECK(cpu_device(0).to_string() == local_cpu0);
  CHECK(cpu_device(5).to_string() == "/job:localhost/replica:0/task:0/device:CPU:5");
  auto devices = cpu_devices(3);
  REQUIRE(devices.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(devices[static_cast<std::size_t>(i)] == cpu_device(i));
    CHECK(devices[static_cast<std::size_t>(i)].device_index() == i);
  }
  CHECK(cpu_devices(0).empty());
  CHECK_THROWS_AS(cpu_device(-1), value_error);
  CHECK_THROWS_AS(cpu_devices(-1), value_error);
}

TEST_CASE("device_scope sets the current device and nests") {
  CHECK(current_device() == cpu_device(0));
  {
    device_scope outer("/cpu:1");
    CHECK(current_device() == cpu_device(1));
    {
      device_scope inner("/gpu:2");
      CHECK(current_device().to_string() == "/job:localhost/replica:0/task:0/device:GPU:2");
      {
        device_scope innermost(cpu_device(3));
        CHECK(current_device() == cpu_device(3));
      }
      CHECK(current_device().is_gpu());
    }
    CHECK(current_device() == cpu_device(1));
  }
  CHECK(current_device() == cpu_device(0));
}

TEST_CASE("device_scope is per thread") {
  device_scope scope(cpu_device(2));
  device_spec seen_by_other_thread;
  std::thread other([&] { seen_by_other_thread = current_device(); });
  other.join();
  CHECK(seen_by_other_thread == cpu_device(0));
  CHECK(current_device() == cpu_device(2));
}

// -- this process's task (a multi-worker strategy names it) --------------------

namespace {

/// Names this process's devices after `name` until destroyed, then gives
/// them back the name they had.
class named_task {
public:
  explicit named_task(const detail::task_name& name) : former_(detail::local_task()) {
    detail::set_local_task(name);
  }
  ~named_task() { detail::set_local_task(former_); }
  named_task(const named_task&) = delete;
  named_task& operator=(const named_task&) = delete;

private:
  detail::task_name former_;
};

} // namespace

TEST_CASE("a named task: unset jobs and localhost resolve to it, its devices are local") {
  const std::string worker1 = "/job:worker/replica:0/task:1";
  CHECK(current_device().to_string() == local_cpu0);
  {
    named_task task({"worker", 1});
    for (const char* text : {"", "/cpu:0", "/job:localhost", "/device:CPU:0",
                             "/job:localhost/replica:0/task:0/device:CPU:0"}) {
      CAPTURE(text);
      CHECK(device_spec::parse(text).canonical().to_string() == worker1 + "/device:CPU:0");
    }
    CHECK(device_spec::parse("/gpu:1").canonical().to_string() == worker1 + "/device:GPU:1");
    CHECK(cpu_device(2).to_string() == worker1 + "/device:CPU:2");
    // What the default device is follows the name; scopes canonicalise too.
    CHECK(current_device().to_string() == worker1 + "/device:CPU:0");
    {
      device_scope scope("/cpu:3");
      CHECK(current_device().to_string() == worker1 + "/device:CPU:3");
    }
    // What is unset comes from this task; what is given stays (TF's merge).
    CHECK(device_spec::parse("/task:3/cpu:0").canonical().to_string()
          == "/job:worker/replica:0/task:3/device:CPU:0");
    CHECK(device_spec::parse("/job:worker/cpu:1").canonical().to_string()
          == worker1 + "/device:CPU:1");
    // Other tasks' devices keep their names and are remote; this task's,
    // by any of its names, are local.
    CHECK(device_spec::parse("/job:worker/task:0/cpu:0").canonical().to_string()
          == "/job:worker/replica:0/task:0/device:CPU:0");
    CHECK_FALSE(device_spec::parse("/job:worker/task:0/cpu:0").is_local());
    CHECK_FALSE(device_spec::parse("/job:chief/task:1/cpu:0").is_local());
    CHECK_FALSE(device_spec::parse("/job:worker/cpu:0").is_local());
    CHECK(device_spec::parse("/job:worker/task:1/cpu:0").is_local());
    CHECK(device_spec::parse(worker1 + "/device:GPU:0").is_local());
    CHECK(device_spec::parse("/job:localhost/cpu:0").is_local());
    CHECK(device_spec::parse("/cpu:0").is_local());
    // Canonical names stay as they are.
    CHECK(cpu_device(2).canonical() == cpu_device(2));
    {
      named_task chief({"chief", 0});
      CHECK(cpu_device(0).to_string() == "/job:chief/replica:0/task:0/device:CPU:0");
      CHECK(current_device() == cpu_device(0));
      CHECK_FALSE(device_spec::parse(worker1 + "/device:CPU:0").is_local());
    }
    std::string seen_by_other_thread;
    std::thread other([&] { seen_by_other_thread = current_device().to_string(); });
    other.join();
    CHECK(seen_by_other_thread == worker1 + "/device:CPU:0");
  }
  CHECK(current_device().to_string() == local_cpu0);
  CHECK(cpu_device(0).to_string() == local_cpu0);
  CHECK_FALSE(device_spec::parse("/job:worker/task:1/cpu:0").is_local());
}

TEST_CASE("a task name must be a job name and a task that is not negative") {
  CHECK_THROWS_WITH_AS(detail::set_local_task({"1worker", 0}),
                       "cannot name this process's devices /job:1worker/replica:0/task:0: the "
                       "job must be a letter followed by letters, digits or '_', and the task "
                       "not negative",
                       value_error);
  CHECK_THROWS_AS(detail::set_local_task({"worker", -1}), value_error);
  CHECK_THROWS_AS(detail::set_local_task({"", 0}), value_error);
  CHECK(detail::local_task() == detail::task_name{"localhost", 0});
}

// The device registry: the host kind serves CPU and (until the CUDA kind
// exists) GPU devices; a test-only "simulated device memory" kind, whose
// buffers the host must not read, is registered for device type SIMMEM:
// host access to its tensors is a device_error naming the device, copies
// to and from the host go through its registered copies, kernels are
// looked up in its own table (a missing one is a device_error naming kind
// and kernel), and its buffers go back to its allocator. Suite 'unit'.

#include "devices/device_registry.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "devices/device_executor.hpp"
#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

// -- the simulated device memory kind ------------------------------------------
// Its memory is host memory underneath, but flagged not host-accessible, so
// the library must reach it only through the kind's copies and kernels.

std::atomic<int> allocations{0};
std::atomic<int> frees{0};
std::atomic<std::size_t> bytes_allocated{0};
std::atomic<std::size_t> bytes_freed{0};
std::atomic<int> copies_in{0};
std::atomic<int> copies_out{0};
std::atomic<int> adds{0};

void* simulated_allocate(const device_spec&, std::size_t bytes) {
  ++allocations;
  bytes_allocated += bytes;
  return ::operator new(bytes, std::align_val_t{64});
}

void simulated_free(void* memory, std::size_t bytes) noexcept {
  ++frees;
  bytes_freed += bytes;
  ::operator delete(memory, std::align_val_t{64});
}

void simulated_zero(const device_spec&, void* memory, std::size_t bytes) {
  std::memset(memory, 0, bytes);
}

void copy_to_simulated(const device_spec&, void* destination, const device_spec&,
                       const void* source, std::size_t bytes) {
  ++copies_in;
  if (bytes != 0)
    std::memcpy(destination, source, bytes);
}

void copy_from_simulated(const device_spec&, void* destination, const device_spec&,
                         const void* source, std::size_t bytes) {
  ++copies_out;
  if (bytes != 0)
    std::memcpy(destination, source, bytes);
}

/// The kind's only kernel: float32 add, on the device addresses.
void simulated_add(tensor& accumulator, const tensor& x) {
  ++adds;
  REQUIRE(accumulator.dtype() == dtype::f32);
  auto* a = reinterpret_cast<float*>(accumulator.buffer().data());
  const auto* b = reinterpret_cast<const float*>(x.buffer().data());
  for (std::int64_t i = 0; i < x.num_elements(); ++i)
    a[i] += b[i];
}

constexpr device_kind simulated{
  .name = "simulated",
  .host_accessible = false,
  .allocate = simulated_allocate,
  .free = simulated_free,
  .zero = simulated_zero,
  .executor = nullptr,
  .kernels = {.add = simulated_add},
};

/// Registers the simulated kind for SIMMEM devices while it lives.
struct simulated_registration {
  simulated_registration() {
    detail::register_device_kind("SIMMEM", simulated);
    detail::register_copy(detail::host_kind(), simulated, copy_to_simulated);
    detail::register_copy(simulated, detail::host_kind(), copy_from_simulated);
    detail::register_copy(simulated, simulated, copy_from_simulated);
  }
  ~simulated_registration() { detail::unregister_device_kind("SIMMEM"); }
};

const device_spec sim0{"/device:SIMMEM:0"};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The message of the device_error that `f` throws ("" if none).
template <class F>
std::string device_error_of(F f) {
  try {
    f();
  } catch (const device_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("CPU, GPU and unknown device types are host memory") {
  const auto& host = detail::host_kind();
  CHECK(host.name == "host");
  CHECK(host.host_accessible);
  CHECK(&detail::kind_of(device_spec{"/cpu:0"}) == &host);
  CHECK(&detail::kind_of(device_spec{}) == &host);
  CHECK(&detail::kind_of(device_spec{"/gpu:1"}) == &host); // until the CUDA kind exists
  CHECK(&detail::kind_of(device_spec{"/tpu:0"}) == &host);
  CHECK(&detail::kind_of(sim0) == &host);                  // not registered yet
  const auto gpu = tensor::from<float>({1, 2}, {2}, "/gpu:0");
  CHECK(gpu.buffer().host_accessible());
  CHECK(gpu.buffer().kind() == &host);
  CHECK(gpu.buffer().bytes() == 8);
  CHECK(gpu.data<float>()[1] == 2.0f);
  // Host buffers keep the 64-byte alignment.
  for (std::int64_t n : {0, 1, 3, 1000})
    CHECK(reinterpret_cast<std::uintptr_t>(tensor::zeros(dtype::f64, {n}).buffer().data()) % 64 == 0);
  CHECK(detail::executor_of(cpu_device(0), 0us) != nullptr);
  const bool host_copies = detail::copy_between(host, host) != nullptr;
  CHECK(host_copies);
}

TEST_CASE("registering a kind: CPU is refused, a second kind for a type is refused") {
  CHECK_THROWS_AS(detail::register_device_kind("CPU", simulated), value_error);
  simulated_registration registration;
  CHECK(&detail::kind_of(sim0) == &simulated);
  CHECK(&detail::kind_of(device_spec{"/job:localhost/device:SIMMEM:3"}) == &simulated);
  detail::register_device_kind("SIMMEM", simulated); // again: no change
  CHECK_THROWS_AS(detail::register_device_kind("SIMMEM", detail::host_kind()), value_error);
  CHECK(contains(device_error_of([] { detail::executor_of(sim0, 0us); }), "simulated"));
  static constexpr device_kind other{.name = "other", .host_accessible = false};
  CHECK(contains(device_error_of([] { detail::copy_between(simulated, other); }),
                 "no copy from simulated memory to other memory"));
}

TEST_CASE("a tensor in memory the host cannot read: access is a device_error, to() copies back") {
  const int allocated_before = allocations;
  const int freed_before = frees;
  const std::size_t bytes_allocated_before = bytes_allocated;
  const std::size_t bytes_freed_before = bytes_freed;
  {
    simulated_registration registration;
    const auto host = tensor::from<float>({1.5f, -2.0f, 3.0f}, {3});
    const int in_before = copies_in;
    auto t = host.to(sim0);
    CHECK(copies_in == in_before + 1);
    CHECK(t.device() == sim0.canonical());
    CHECK_FALSE(t.buffer().host_accessible());
    CHECK(t.buffer().kind() == &simulated);
    CHECK(t.dtype() == dtype::f32);
    CHECK(t.shape() == shape_t{3});
    CHECK(t.byte_size() == 12);

    const auto message = device_error_of([&] { (void) t.data<float>(); });
    CHECK(contains(message, "simulated memory of device "
                            "/job:localhost/replica:0/task:0/device:SIMMEM:0"));
    CHECK(contains(message, "copy it to the host with to(device)"));
    CHECK_THROWS_AS(t.raw_data(), device_error);
    CHECK_THROWS_AS(std::as_const(t).raw_data(), device_error);
    CHECK_THROWS_AS((void) t.at<float>(0), device_error);
    CHECK_THROWS_AS((void) t.as_double(0), device_error);
    CHECK_THROWS_AS((void) t.to_string(), device_error);
    CHECK_THROWS_AS((void) (t == host), device_error);
    CHECK_THROWS_AS((void) t.data<double>(), dtype_error); // the dtype is checked first

    // Handles, views and copies that need no host access work.
    auto view = t.reshaped({3, 1});
    CHECK(view.same_buffer(t));
    CHECK(t.buffer_use_count() == 2);
    const auto on_device = t.copy(); // through the simulated-to-simulated copy
    CHECK_FALSE(on_device.same_buffer(t));
    CHECK_FALSE(on_device.buffer().host_accessible());
    CHECK(on_device.to("/cpu:0") == host);

    const int out_before = copies_out;
    const auto back = t.to("/cpu:0");
    CHECK(copies_out == out_before + 1);
    CHECK(back == host);
    CHECK(back.device() == cpu_device(0).canonical());

    // Factories on the kind: zeros through its zero, the others through
    // the host and a copy.
    CHECK(tensor::zeros(dtype::f32, {4}, sim0).to("/cpu:0") == tensor::zeros(dtype::f32, {4}));
    CHECK(tensor::filled(dtype::i64, {2}, 7.0, sim0).to("/cpu:0")
          == tensor::filled(dtype::i64, {2}, 7.0));
    CHECK(tensor::from<double>({1.0, 2.0}, {2}, sim0).to("/cpu:0")
          == tensor::from<double>({1.0, 2.0}));
    CHECK(tensor::scalar(5, sim0).to("/cpu:0") == tensor::scalar(5));

    // copy_into between kinds uses the registered copies.
    auto target = tensor::zeros(dtype::f32, {3});
    copy_into(target, t);
    CHECK(target == host);
    auto device_target = tensor::zeros(dtype::f32, {3}, sim0);
    copy_into(device_target, tensor::filled(dtype::f32, {3}, 2.0));
    CHECK(device_target.to("/cpu:0") == tensor::filled(dtype::f32, {3}, 2.0));
  }
  // Every simulated buffer went back to the kind's allocator.
  CHECK(allocations - allocated_before == frees - freed_before);
  CHECK(bytes_allocated - bytes_allocated_before == bytes_freed - bytes_freed_before);
  CHECK(allocations > allocated_before);
}

TEST_CASE("kernels are looked up in the kind's table; a missing one names kind and kernel") {
  simulated_registration registration;
  auto a = tensor::from<float>({1, 2, 3}).to(sim0);
  const auto b = tensor::from<float>({10, 20, 30}).to(sim0);
  const int adds_before = adds;
  add_into(a, b);
  CHECK(adds == adds_before + 1);
  CHECK(a.to("/cpu:0") == tensor::from<float>({11, 22, 33}));

  CHECK(device_error_of([&] { scale_into(a, 2.0); })
        == "scale_into: the simulated device kind has no such kernel");
  CHECK(device_error_of([&] { subtract_into(a, b); })
        == "subtract_into: the simulated device kind has no such kernel");
  CHECK(contains(device_error_of([&] { (void) reduce_sum_axis(a, 0); }),
                 "reduce_sum_axis: the simulated device kind has no such kernel"));
  CHECK(contains(device_error_of([&] { divide_into(a, 2); }), "divide_into"));
  CHECK(contains(device_error_of([&] { axpy_into(a, 1.0, b); }), "axpy_into"));
  // Same-kind copies use the kind's copy kernel, which it lacks.
  CHECK(contains(device_error_of([&] { copy_into(a, b); }), "copy_into"));

  // Operands in different kinds of memory are refused, naming both.
  auto host = tensor::from<float>({1, 1, 1});
  const auto mixed = device_error_of([&] { add_into(host, b); });
  CHECK(contains(mixed, "add_into: operands in different memory: host"));
  CHECK(contains(mixed, "simulated (/job:localhost/replica:0/task:0/device:SIMMEM:0)"));
  // dtype and shape checks come first, as before.
  CHECK_THROWS_AS(add_into(host, tensor::from<double>({1, 1, 1}).to(sim0)), dtype_error);
  CHECK_THROWS_AS(add_into(host, tensor::from<float>({1, 1}).to(sim0)), shape_error);
  // Host memory labelled with two devices is one kind.
  auto on_gpu = tensor::from<float>({1, 2, 3}, {3}, "/gpu:0");
  add_into(on_gpu, tensor::from<float>({1, 1, 1}, {3}, "/cpu:1"));
  CHECK(on_gpu == tensor::from<float>({2, 3, 4}));
}

TEST_CASE("after unregistering, the device type is host memory again") {
  {
    simulated_registration registration;
    CHECK_FALSE(tensor::zeros(dtype::f32, {1}, sim0).buffer().host_accessible());
  }
  const auto t = tensor::zeros(dtype::f32, {1}, sim0);
  CHECK(t.buffer().host_accessible());
  CHECK(t.data<float>()[0] == 0.0f);
}

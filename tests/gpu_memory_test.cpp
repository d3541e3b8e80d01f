// GPU tensors in CUDA memory (suite 'gpu', skipped without a device):
// placement and host access, copies host -> GPU -> host bit for bit for
// every dtype and size (past two 4 MiB staging chunks), copies between
// logical GPUs, zeros/filled/from on a GPU, the caching allocator seen
// through memory_stats, and the errors: out of memory, a GPU that does
// not exist; DLPack's kDLCUDA in and out without a copy. Physical GPU 0
// serves two logical GPUs here (/gpu:0, /gpu:1), so copies between logical
// GPUs run on any machine with a GPU.

#include "lockstep/error.hpp"
#include "lockstep/gpu.hpp"
#include "lockstep/tensor.hpp"

#include "devices/caching_pool.hpp"
#include "devices/cuda/cuda_check.hpp"

#include "gpu_support.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace gpu_test;

namespace {

/// The layout of this process, fixed by the first call: physical GPU 0 as
/// two logical GPUs, every other physical GPU as one.
const std::vector<device_spec>& logical() {
  static const auto devices = gpu_devices(2, 0);
  return devices;
}

/// The first logical GPU of physical GPU `p` (p >= 1) in this layout.
device_spec first_of_physical(int p) {
  return gpu(2 + p - 1);
}

const device_spec host = cpu_device(0).canonical();

constexpr std::int64_t MiB = 1024 * 1024;

std::size_t class_of(const tensor& t) {
  return detail::caching_pool::class_size(t.byte_size());
}

} // namespace

TEST_CASE("the layout: two logical GPUs on physical GPU 0") {
  const auto& devices = logical();
  REQUIRE(devices.size() == 2);
  CHECK(devices[0] == gpu(0));
  CHECK(devices[1] == gpu(1));
  CHECK(physical_gpu_count() == detail::cuda_device_count());
  CHECK(gpu_count() == 2 + physical_gpu_count() - 1);
  CHECK(gpu_devices(2, 0) == devices); // the layout in use, repeated
  CHECK(has(error_of<device_error>([] { gpu_devices(3, 0); }), "cannot be changed"));
  CHECK_THROWS_AS(gpu_devices(0, 0), value_error);
  CHECK_THROWS_AS(gpu_devices(65, 0), value_error);
  CHECK(has(error_of<device_error>([] { gpu_devices(1, physical_gpu_count()); }),
            "no CUDA device " + std::to_string(physical_gpu_count())));
}

TEST_CASE("a GPU tensor is in CUDA memory; the host cannot read it and is told to copy") {
  logical();
  auto t = tensor::zeros(dtype::f32, {4}, "/gpu:0");
  CHECK(t.device() == gpu(0));
  REQUIRE(t.buffer().kind() != nullptr);
  CHECK(t.buffer().kind()->name == "cuda");
  CHECK_FALSE(t.buffer().kind()->host_accessible);
  CHECK_FALSE(t.buffer().host_accessible());
  CHECK(t.buffer().bytes() == 16);
  CHECK(t.buffer().data() != nullptr);
  const auto message = error_of<device_error>([&] { (void) t.data<float>(); });
  CHECK(has(message, "cuda memory of device " + gpu(0).to_string()));
  CHECK(has(message, "to(device)"));
  CHECK_THROWS_AS((void) t.raw_data(), device_error);
  CHECK_THROWS_AS((void) t.as_double(0), device_error);
  CHECK_THROWS_AS((void) t.to_string(), device_error);
  CHECK_THROWS_AS((void) (t == t), device_error);
  // Host tensors stay host memory; a copy to the host is readable.
  CHECK(tensor::zeros(dtype::f32, {4}, host).buffer().host_accessible());
  const auto back = t.to(host);
  CHECK(back.buffer().host_accessible());
  CHECK(back == tensor::zeros(dtype::f32, {4}, host));
  // Tensors on the two logical GPUs have buffers of their own.
  const auto other = tensor::zeros(dtype::f32, {4}, "/gpu:1");
  CHECK(other.device() == gpu(1));
  CHECK(other.buffer().kind() == t.buffer().kind());
  CHECK(other.buffer().data() != t.buffer().data());
}

TEST_CASE("host -> GPU -> host round trips bit for bit: every dtype, 0 to 9 MiB + 3 elements") {
  logical();
  for (auto type : all_dtypes)
    for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000},
                               9 * MiB + 3}) {
      INFO(name_of(type), ", ", count, " elements");
      auto original = tensor::zeros(type, {count}, host);
      fill_bytes(original, static_cast<std::uint64_t>(count) + static_cast<std::uint64_t>(type));
      const auto on_gpu = original.to("/gpu:0");
      CHECK(on_gpu.device() == gpu(0));
      CHECK(on_gpu.shape() == shape_t{count});
      CHECK(on_gpu.dtype() == type);
      CHECK(same_bytes(on_gpu.to(host), original));
      // A copy from the host has read its source when it returns.
      auto source = original.copy();
      const auto taken = source.to("/gpu:1");
      fill_bytes(source, 99);
      CHECK(same_bytes(taken.to(host), original));
      // GPU -> GPU: on one logical GPU, to the other, and back.
      const auto copied = on_gpu.copy();
      CHECK(copied.device() == gpu(0));
      CHECK_FALSE(copied.same_buffer(on_gpu));
      CHECK(same_bytes(copied.to(host), original));
      const auto moved = on_gpu.to("/gpu:1");
      CHECK(moved.device() == gpu(1));
      CHECK(same_bytes(moved.to(host), original));
      CHECK(same_bytes(moved.to("/gpu:0").to(host), original));
      // Another physical GPU: a peer copy.
      if (physical_gpu_count() >= 2) {
        const auto peer = on_gpu.to(first_of_physical(1));
        CHECK(peer.device() == first_of_physical(1));
        CHECK(same_bytes(peer.to(host), original));
        CHECK(same_bytes(peer.to("/gpu:1").to(host), original));
      }
    }
}

TEST_CASE("copy_into between host and GPU memory and between logical GPUs") {
  logical();
  for (auto type : all_dtypes)
    for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{5000}}) {
      INFO(name_of(type), ", ", count, " elements");
      const auto original = values(type, {count}, 7);
      auto on_gpu = tensor::zeros(type, {count}, "/gpu:0");
      copy_into(on_gpu, original); // host -> GPU
      CHECK(same_bytes(on_gpu, original));
      auto other = tensor::zeros(type, {count}, "/gpu:1");
      copy_into(other, on_gpu); // GPU -> GPU, two streams
      auto back = tensor::zeros(type, {count}, host);
      copy_into(back, other); // GPU -> host
      CHECK(same_bytes(back, original));
      auto same_gpu = tensor::zeros(type, {count}, "/gpu:0");
      copy_into(same_gpu, on_gpu);
      CHECK(same_bytes(same_gpu, original));
      copy_into(on_gpu, on_gpu); // itself: nothing changes
      CHECK(same_bytes(on_gpu, original));
    }
  auto wrong = tensor::zeros(dtype::f32, {3}, "/gpu:0");
  CHECK_THROWS_AS(copy_into(wrong, tensor::zeros(dtype::f64, {3})), dtype_error);
  CHECK_THROWS_AS(copy_into(wrong, tensor::zeros(dtype::f32, {4}, "/gpu:1")), shape_error);
}

TEST_CASE("zeros, filled, from and scalar make GPU tensors with the host's bytes") {
  logical();
  for (auto type : all_dtypes)
    for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000}}) {
      INFO(name_of(type), ", ", count, " elements");
      // A reused block is zeroed too: dirty it first.
      {
        auto dirty = tensor::zeros(type, {count}, host);
        fill_bytes(dirty, 5);
        const auto on_gpu = dirty.to("/gpu:0");
      }
      const auto zeros = tensor::zeros(type, {count}, "/gpu:0");
      CHECK(zeros.buffer().kind()->name == "cuda");
      CHECK(same_bytes(zeros, tensor::zeros(type, {count}, host)));
      const auto filled = tensor::filled(type, {count}, -3.0, "/gpu:1");
      CHECK(filled.device() == gpu(1));
      CHECK(filled.buffer().kind()->name == "cuda");
      CHECK(same_bytes(filled, tensor::filled(type, {count}, -3.0, host)));
      const auto uninitialized = tensor::uninitialized(type, {count}, "/gpu:0");
      CHECK(uninitialized.shape() == shape_t{count});
      CHECK(uninitialized.buffer().kind()->name == "cuda");
    }
  const auto from = tensor::from<double>({1.5, -2.0, 3.25}, {3}, "/gpu:0");
  CHECK(from.buffer().kind()->name == "cuda");
  CHECK(from.to(host) == tensor::from<double>({1.5, -2.0, 3.25}, {3}, host));
  const auto matrix = tensor::from<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}, "/gpu:1");
  CHECK(matrix.shape() == shape_t{2, 3});
  CHECK(matrix.to(host) == tensor::from<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}, host));
  CHECK_THROWS_AS(tensor::from<float>({1, 2, 3}, {2}, "/gpu:0"), shape_error);
  const auto scalar = tensor::scalar(2.5f, "/gpu:0");
  CHECK(scalar.rank() == 0);
  CHECK(scalar.to(host).as_double(0) == 2.5);
  // reshaped shares the device buffer.
  const auto flat = matrix.reshaped({6});
  CHECK(flat.same_buffer(matrix));
  CHECK(flat.to(host) == tensor::from<std::int32_t>({1, 2, 3, 4, 5, 6}, {6}, host));
}

TEST_CASE("the caching allocator: a freed block serves the next buffer of its size") {
  logical();
  const auto device = gpu(0);
  const auto start = memory_stats(device);
  std::size_t block = 0;
  {
    const auto t = tensor::zeros(dtype::f32, {12345}, device);
    block = class_of(t);
    const auto s = memory_stats(device);
    CHECK(s.bytes_in_use == start.bytes_in_use + block);
    CHECK(s.allocations == start.allocations + 1);
  }
  const auto freed = memory_stats(device);
  CHECK(freed.bytes_in_use == start.bytes_in_use);
  CHECK(freed.bytes_cached >= block);
  for (int i = 0; i < 10; ++i) {
    const auto again = tensor::zeros(dtype::f32, {12345}, device);
    CHECK(memory_stats(device).bytes_in_use == start.bytes_in_use + block);
  }
  const auto after = memory_stats(device);
  CHECK(after.device_allocations == freed.device_allocations); // no cudaMalloc
  CHECK(after.allocations == freed.allocations + 10);
  CHECK(after.bytes_in_use == start.bytes_in_use);
  // Each logical GPU has a pool of its own.
  const auto other_before = memory_stats(gpu(1));
  {
    const auto t = tensor::zeros(dtype::f32, {12345}, gpu(1));
    CHECK(memory_stats(gpu(1)).bytes_in_use == other_before.bytes_in_use + block);
    CHECK(memory_stats(device).bytes_in_use == start.bytes_in_use);
  }
  CHECK(memory_stats(gpu(1)).bytes_in_use == other_before.bytes_in_use);
}

TEST_CASE("peak bytes in use and reset_peak_memory_stats") {
  logical();
  const auto device = gpu(0);
  reset_peak_memory_stats(device);
  const auto start = memory_stats(device);
  CHECK(start.peak_bytes_in_use == start.bytes_in_use);
  {
    const auto big = tensor::zeros(dtype::f32, {3 * MiB / 4 + 5}, device); // 3 MiB + 20: 4 MiB
    CHECK(class_of(big) == 4 * static_cast<std::size_t>(MiB));
    const auto s = memory_stats(device);
    CHECK(s.bytes_in_use == start.bytes_in_use + 4 * MiB);
    CHECK(s.peak_bytes_in_use == start.bytes_in_use + 4 * MiB);
  }
  auto s = memory_stats(device);
  CHECK(s.bytes_in_use == start.bytes_in_use);
  CHECK(s.peak_bytes_in_use == start.bytes_in_use + 4 * MiB);
  reset_peak_memory_stats(device);
  s = memory_stats(device);
  CHECK(s.peak_bytes_in_use == s.bytes_in_use);
  CHECK_THROWS_AS(reset_peak_memory_stats(gpu(gpu_count())), device_error);
}

TEST_CASE("release_cached_memory gives freed blocks back to the device") {
  logical();
  const auto device = gpu(1);
  { const auto t = tensor::zeros(dtype::f64, {100000}, device); }
  const auto before = memory_stats(device);
  CHECK(before.bytes_cached > 0);
  CHECK(release_cached_memory(device) >= before.bytes_cached);
  const auto after = memory_stats(device);
  CHECK(after.bytes_cached == 0);
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(release_cached_memory(device) == 0);
  // The next buffer needs the device again, and works.
  const auto t = tensor::filled(dtype::f64, {100000}, 1.5, device);
  CHECK(memory_stats(device).device_allocations > after.device_allocations);
  CHECK(same_bytes(t, tensor::filled(dtype::f64, {100000}, 1.5, host)));
}

TEST_CASE("an allocation no GPU has is a device_error naming out of memory and the device") {
  logical();
  const auto before = memory_stats(gpu(0));
  const auto message = error_of<device_error>(
    [] { (void) tensor::uninitialized(dtype::f32, {std::int64_t{1} << 40}, "/gpu:0"); });
  CHECK(has(message, "out of memory"));
  CHECK(has(message, gpu(0).to_string()));
  CHECK(has(message, "4398046511104 bytes"));
  const auto after = memory_stats(gpu(0));
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.allocations == before.allocations);
  CHECK(after.bytes_cached == 0); // given back before the second try
  // The device goes on working.
  const auto original = values(dtype::f32, {1000}, 3);
  CHECK(same_bytes(original.to("/gpu:0"), original));
}

TEST_CASE("a GPU past the logical GPUs is a device_error naming it") {
  logical();
  const int n = gpu_count();
  const auto missing = "/gpu:" + std::to_string(n);
  const auto message = error_of<device_error>([&] { (void) tensor::zeros(dtype::f32, {1}, missing); });
  CHECK(has(message, "device:GPU:" + std::to_string(n)));
  CHECK(has(message, std::to_string(n) + " logical GPU"));
  CHECK_THROWS_AS(tensor::zeros(dtype::f32, {1}, host).to(missing), device_error);
  CHECK_THROWS_AS(memory_stats(gpu(n)), device_error);
  CHECK_THROWS_AS(release_cached_memory(gpu(n)), device_error);
}

TEST_CASE("threads copying to and from both logical GPUs at once") {
  logical();
  constexpr int threads = 4;
  std::vector<int> wrong(threads, 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      const auto device = gpu(t % 2);
      for (int round = 0; round < 10; ++round) {
        auto original = tensor::zeros(dtype::i32, {MiB + 17 * t}, host); // one chunk and a bit
        fill_bytes(original, static_cast<std::uint64_t>(100 * t + round));
        const auto there = original.to(device);
        const auto across = there.to(gpu((t + 1) % 2));
        wrong[static_cast<std::size_t>(t)] += same_bytes(across.to(host), original) ? 0 : 1;
      }
    });
  for (auto& w : workers)
    w.join();
  for (int t = 0; t < threads; ++t)
    CHECK(wrong[static_cast<std::size_t>(t)] == 0);
}

// -- DLPack (tests/dlpack_test.cpp covers the host side) -------------------------

namespace {

/// A producer's CUDA tensor of float32 over cudaMalloc'd memory; its
/// deleter frees it and counts its calls.
struct cuda_produced {
  DLManagedTensor managed{};
  std::int64_t shape[1] = {0};
  void* memory = nullptr;
  int* deleted = nullptr;
};

void delete_cuda_produced(DLManagedTensor* self) {
  auto* owner = static_cast<cuda_produced*>(self->manager_ctx);
  LOCKSTEP_CUDA_CHECK(cudaFree(owner->memory));
  ++*owner->deleted;
  delete owner;
}

/// `values` in CUDA memory of physical GPU 0, `data_offset` bytes in.
DLManagedTensor* produce_on_gpu(const std::vector<float>& values, std::size_t data_offset,
                                int* deleted) {
  auto* owner = new cuda_produced;
  owner->deleted = deleted;
  owner->shape[0] = static_cast<std::int64_t>(values.size());
  LOCKSTEP_CUDA_CHECK(cudaSetDevice(0));
  LOCKSTEP_CUDA_CHECK(cudaMalloc(&owner->memory, data_offset + values.size() * sizeof(float)));
  auto* data = static_cast<std::byte*>(owner->memory) + data_offset;
  LOCKSTEP_CUDA_CHECK(
    cudaMemcpy(data, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
  auto& dl = owner->managed.dl_tensor;
  dl.data = data;
  dl.device = {kDLCUDA, 0};
  dl.ndim = 1;
  dl.dtype = {kDLFloat, 32, 1};
  dl.shape = owner->shape;
  owner->managed.manager_ctx = owner;
  owner->managed.deleter = delete_cuda_produced;
  return &owner->managed;
}

} // namespace

TEST_CASE("DLPack: a GPU tensor goes out as kDLCUDA and comes back without a copy") {
  logical();
  const auto original = tensor::from<float>({1.5f, -2.0f, 3.25f}, {3}, host);
  auto t = original.to("/gpu:1");
  auto* out = t.to_dlpack();
  CHECK(out->dl_tensor.device.device_type == kDLCUDA);
  CHECK(out->dl_tensor.device.device_id == 0); // the physical GPU of /gpu:1
  CHECK(out->dl_tensor.data == t.buffer().data());
  CHECK(t.buffer_use_count() == 2);
  {
    auto back = tensor::from_dlpack(out); // the first logical GPU of physical GPU 0
    CHECK(back.device() == gpu(0));
    CHECK(back.buffer().data() == t.buffer().data());
    CHECK(back.buffer().kind() == t.buffer().kind());
    CHECK(back.to(host) == original);
  }
  CHECK(t.buffer_use_count() == 1);

  auto on_second = tensor::from_dlpack(t.to_dlpack(), gpu(1));
  CHECK(on_second.device() == gpu(1));
  CHECK(on_second.buffer().data() == t.buffer().data());

  auto* wrong = t.to_dlpack();
  CHECK(has(error_of<device_error>([&] { (void) tensor::from_dlpack(wrong, host); }),
            "is not a logical GPU of CUDA device 0"));
  auto* strided = t.to_dlpack();
  std::int64_t every_other[] = {2};
  strided->dl_tensor.strides = every_other;
  CHECK(has(error_of<value_error>([&] { (void) tensor::from_dlpack(strided); }),
            "is not compact (row-major); lockstep copies strided memory only on the host"));
  CHECK(t.buffer_use_count() == 2); // t and on_second: the failed calls released theirs

  auto* copy = t.to_dlpack_copy();
  CHECK(copy->dl_tensor.device.device_type == kDLCUDA);
  CHECK(copy->dl_tensor.data != t.buffer().data());
  copy->deleter(copy);
}

TEST_CASE("DLPack: a producer's CUDA memory is released once, after lockstep's last handle") {
  logical();
  int deleted = 0;
  auto* managed = produce_on_gpu({1.0f, 2.0f, 3.0f, 4.0f}, 0, &deleted);
  const auto* data = managed->dl_tensor.data;
  {
    auto t = tensor::from_dlpack(managed);
    CHECK(t.device() == gpu(0));
    CHECK(t.buffer().data() == data);
    auto view = t.reshaped({2, 2});
    t = tensor();
    // Work on lockstep's stream over the producer's memory, then the release.
    add_into(view, tensor::filled(dtype::f32, {2, 2}, 10.0, gpu(0)));
    CHECK(view.to(host) == tensor::from<float>({11.0f, 12.0f, 13.0f, 14.0f}, {2, 2}, host));
    CHECK(deleted == 0);
  }
  CHECK(deleted == 1);

  // Not aligned to its elements: copied on the device, released at once.
  managed = produce_on_gpu({5.0f, -6.0f}, 2, &deleted);
  data = managed->dl_tensor.data;
  auto u = tensor::from_dlpack(managed);
  CHECK(deleted == 2);
  CHECK(u.buffer().data() != data);
  CHECK(u.to(host) == tensor::from<float>({5.0f, -6.0f}, {2}, host));
}

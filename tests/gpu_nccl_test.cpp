// NCCL and its watchdog (suite 'gpu', skipped without a device; a process
// of its own, since an aborted communicator may leave work on a stream).
// Physical GPU 0 serves two logical GPUs here (/gpu:0, /gpu:1), other
// physical GPUs one each (/gpu:2, ...).
//  - nccl_all_reduce: logical GPUs sharing a physical GPU are refused, one
//    component reduces to one device; with two physical GPUs, every dtype
//    and op against the CPU, batch_reduce, an injected asynchronous error
//    and a timeout through the class.
//  - a single-rank communicator on /gpu:0's stream, watched by
//    watch_nccl_work as nccl_all_reduce does (nccl_all_reduce has no
//    single-rank path, so this is how one GPU reaches the watchdog): a
//    collective that completes, an injected asynchronous error (the
//    communicator aborted, a new one works), a timeout on a stream blocked
//    by a host function.

#include "lockstep/config.hpp"
#include "lockstep/cross_device_ops.hpp"
#include "lockstep/error.hpp"
#include "lockstep/gpu.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"

#include "gpu_support.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#if LOCKSTEP_HAVE_NCCL

#include "devices/cuda/cuda_check.hpp"
#include "devices/cuda/cuda_places.hpp"
#include "devices/cuda/nccl_check.hpp"
#include "devices/cuda/nccl_watchdog.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace gpu_test;
using namespace std::chrono_literals;

namespace {

const std::vector<device_spec>& logical() {
  static const auto devices = gpu_devices(2, 0);
  return devices;
}

const device_spec host = cpu_device(0).canonical();

/// The first logical GPU of physical GPU 1 in this layout.
device_spec second_physical() {
  return gpu(2);
}

/// A stream held by a host function until `release` (or, so that a test
/// that fails cannot hang the process, until 5 seconds have passed).
class blocked_stream {
public:
  explicit blocked_stream(cudaStream_t stream) {
    LOCKSTEP_CUDA_CHECK(cudaLaunchHostFunc(stream, &spin, &released_));
    guard_ = std::thread([this] {
      std::unique_lock lock{mutex_};
      wake_.wait_for(lock, 5s, [&] { return done_; });
      released_ = true;
    });
  }

  ~blocked_stream() { release(); }

  blocked_stream(const blocked_stream&) = delete;
  blocked_stream& operator=(const blocked_stream&) = delete;

  void release() {
    if (!guard_.joinable())
      return;
    {
      std::lock_guard lock{mutex_};
      done_ = true;
    }
    wake_.notify_all();
    guard_.join();
  }

private:
  static void spin(void* flag) {
    auto& released = *static_cast<std::atomic<bool>*>(flag);
    while (!released.load())
      std::this_thread::yield();
  }

  std::atomic<bool> released_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread guard_;
};

// -- a single-rank communicator, watched ----------------------------------------

/// A communicator of one rank on /gpu:0's physical GPU.
ncclComm_t single_rank_communicator() {
  auto& place = detail::place_of(gpu(0));
  detail::cuda_device_guard device{place.physical};
  ncclComm_t comm = nullptr;
  int physical = place.physical;
  LOCKSTEP_NCCL_CHECK(ncclCommInitAll(&comm, 1, &physical));
  return comm;
}

/// ncclAllReduce (SUM) of `in` into `out` on /gpu:0's stream, watched by
/// the watchdog until `timeout`, as nccl_all_reduce runs a collective.
void watched_all_reduce(ncclComm_t comm, const tensor& in, tensor& out,
                        std::chrono::milliseconds timeout) {
  auto& place = detail::place_of(gpu(0));
  detail::cuda_device_guard device{place.physical};
  LOCKSTEP_NCCL_CHECK(ncclAllReduce(in.buffer().data(), out.buffer().data(),
                                    static_cast<std::size_t>(in.num_elements()), ncclFloat32,
                                    ncclSum, comm, place.stream));
  cudaEvent_t event = nullptr;
  LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  LOCKSTEP_CUDA_CHECK(cudaEventRecord(event, place.stream));
  detail::nccl_work work;
  work.what = "a single-rank test all-reduce";
  work.communicators = {comm};
  work.done = {{place.physical, event}};
  work.deadline = std::chrono::steady_clock::now() + timeout;
  try {
    detail::watch_nccl_work(work);
  } catch (...) {
    (void) cudaEventDestroy(event);
    throw;
  }
  (void) cudaEventDestroy(event);
}

tensor ramp(std::int64_t count, const device_spec& device) {
  std::vector<float> xs;
  for (std::int64_t i = 0; i < count; ++i)
    xs.push_back(static_cast<float>(i) * 0.25f - 3.0f);
  return tensor::from(xs, {count}, device);
}

/// Input r with exact reductions: -1 or 2 for PROD, small integers else.
tensor exact_input(dtype type, std::int64_t count, reduce_op op, int r) {
  auto t = tensor::zeros(type, {count}, cpu_device(r));
  visit_dtype(type, [&]<class T>(T) {
    auto e = t.data<T>();
    for (std::size_t i = 0; i < e.size(); ++i) {
      const double v = op == reduce_op::prod
                         ? ((i + static_cast<std::size_t>(r)) % 3 == 0 ? -1.0 : 2.0)
                         : static_cast<double>((r + 1) * (static_cast<int>(i % 9) - 4));
      e[i] = static_cast<T>(static_cast<float>(v));
    }
  });
  return t;
}

} // namespace

TEST_CASE("a single-rank NCCL all-reduce, watched, completes") {
  logical();
  auto comm = single_rank_communicator();
  for (std::int64_t count : {std::int64_t{1}, std::int64_t{4099}}) {
    const auto in = ramp(count, gpu(0));
    auto out = tensor::zeros(dtype::f32, {count}, gpu(0));
    watched_all_reduce(comm, in, out, 30s);
    CHECK(same_bytes(out, ramp(count, host)));
  }
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("an injected asynchronous NCCL error aborts the communicator; a new one works") {
  logical();
  auto aborted = single_rank_communicator();
  const auto in = ramp(1000, gpu(0));
  auto out = tensor::zeros(dtype::f32, {1000}, gpu(0));
  detail::inject_nccl_async_error(ncclInternalError);
  const auto message =
    error_of<device_error>([&] { watched_all_reduce(aborted, in, out, 30s); });
  CHECK(has(message, "a single-rank test all-reduce"));
  CHECK(has(message, "asynchronous error"));
  CHECK(has(message, ncclGetErrorString(ncclInternalError)));
  CHECK(has(message, "injected"));
  CHECK(has(message, "ncclCommAbort"));
  // `aborted` is freed by the abort. The injection was used up: a new
  // communicator completes.
  auto fresh = single_rank_communicator();
  auto again = tensor::zeros(dtype::f32, {1000}, gpu(0));
  watched_all_reduce(fresh, in, again, 30s);
  CHECK(same_bytes(again, ramp(1000, host)));
  CHECK(ncclCommDestroy(fresh) == ncclSuccess);
}

// -- nccl_all_reduce ------------------------------------------------------------

TEST_CASE("nccl_all_reduce refuses two ranks on one physical GPU, and one component goes to "
          "one device") {
  logical();
  nccl_all_reduce ops;
  CHECK(ops.name() == "nccl_all_reduce");
  const per_replica<tensor> shared{std::vector<tensor>{ramp(10, gpu(0)), ramp(10, gpu(1))}};
  const auto message = error_of<device_error>([&] { ops.reduce(reduce_op::sum, shared, shared); });
  CHECK(has(message, "shares CUDA device 0"));
  CHECK(has(message, "on_device_all_reduce"));
  // Host memory is refused.
  const per_replica<tensor> on_host{std::vector<tensor>{ramp(10, host), ramp(10, cpu_device(1))}};
  CHECK(has(error_of<device_error>([&] { ops.reduce(reduce_op::sum, on_host, on_host); }),
            "NCCL reduces CUDA memory"));
  // One component, elsewhere: reduction_to_one_device.
  const per_replica<tensor> one{std::vector<tensor>{ramp(10, gpu(0))}};
  const auto moved = ops.reduce(reduce_op::sum, one, "/gpu:1");
  REQUIRE(moved.size() == 1);
  CHECK(moved[0].device() == gpu(1));
  CHECK(same_bytes(moved[0], ramp(10, host)));
}

TEST_CASE("nccl_all_reduce: one component on its destination is a single-rank communicator") {
  logical();
  nccl_all_reduce ops;
  const per_replica<tensor> one{std::vector<tensor>{ramp(1000, gpu(0))}};
  for (auto op : all_ops) {
    CAPTURE(to_string(op));
    // batch_reduce: reduce() returns such a value as it is (TF's shortcut).
    const auto results = ops.batch_reduce(op, {{one, one}});
    REQUIRE(results.size() == 1);
    REQUIRE(results[0].size() == 1);
    CHECK(results[0][0].device() == gpu(0));
    CHECK(!results[0][0].same_buffer(one[0])); // NCCL's output, not the input
    CHECK(same_bytes(results[0][0], ramp(1000, host)));
  }
  detail::inject_nccl_async_error(ncclInternalError);
  const auto message = error_of<device_error>([&] { ops.batch_reduce(reduce_op::sum, {{one, one}}); });
  CHECK(has(message, "nccl_all_reduce of 1 tensor on CUDA devices 0"));
  CHECK(has(message, "ncclCommAbort"));
  CHECK(same_bytes(ops.batch_reduce(reduce_op::sum, {{one, one}})[0][0], ramp(1000, host)));
}

TEST_CASE("nccl_all_reduce across two physical GPUs: every dtype and op, batch_reduce") {
  logical();
  if (physical_gpu_count() < 2) {
    MESSAGE("one physical GPU: NCCL needs one rank per GPU; skipped");
    return;
  }
  nccl_all_reduce ops;
  const std::vector<device_spec> ranks{gpu(0), second_physical()};
  for (auto type : all_dtypes)
    for (auto op : all_ops)
      for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{4099}}) {
        INFO(name_of(type), ", ", to_string(op), ", ", count, " elements");
        std::vector<tensor> on_host;
        std::vector<tensor> on_gpus;
        for (int r = 0; r < 2; ++r) {
          on_host.push_back(exact_input(type, count, op, r));
          on_gpus.push_back(on_host.back().to(ranks[static_cast<std::size_t>(r)]));
        }
        const per_replica<tensor> host_value{on_host};
        const per_replica<tensor> gpu_value{on_gpus};
        const auto expected = reduction_to_one_device{}.reduce(op, host_value, host_value);
        const auto result = ops.reduce(op, gpu_value, gpu_value);
        REQUIRE(result.size() == 2);
        for (std::size_t r = 0; r < 2; ++r) {
          CHECK(result[r].device() == ranks[r]);
          CHECK(result[r].buffer().kind()->name == "cuda");
          CHECK(same_bytes(result[r], expected[r]));
        }
      }
  // A batch: one group call per pack.
  std::vector<reduce_pair> pairs;
  std::vector<mirrored<tensor>> expected;
  for (auto type : all_dtypes) {
    std::vector<tensor> on_host;
    std::vector<tensor> on_gpus;
    for (int r = 0; r < 2; ++r) {
      on_host.push_back(exact_input(type, 777, reduce_op::sum, r));
      on_gpus.push_back(on_host.back().to(ranks[static_cast<std::size_t>(r)]));
    }
    const per_replica<tensor> gpu_value{on_gpus};
    pairs.push_back({gpu_value, gpu_value});
    const per_replica<tensor> host_value{on_host};
    expected.push_back(reduction_to_one_device{}.reduce(reduce_op::mean, host_value, host_value));
  }
  for (const pack_options packing : {pack_options{}, pack_options{.bytes_per_pack = 1000},
                                     pack_options{.num_packs = 4}}) {
    CAPTURE(packing.bytes_per_pack);
    CAPTURE(packing.num_packs);
    nccl_all_reduce packed{{.packing = packing}};
    const auto results = packed.batch_reduce(reduce_op::mean, pairs);
    REQUIRE(results.size() == pairs.size());
    for (std::size_t p = 0; p < pairs.size(); ++p)
      for (std::size_t r = 0; r < 2; ++r)
        CHECK(same_bytes(results[p][r], expected[p][r]));
  }
}

TEST_CASE("nccl_all_reduce: an injected asynchronous error, then a new communicator") {
  logical();
  if (physical_gpu_count() < 2) {
    MESSAGE("one physical GPU: the single-rank test above covers the watchdog");
    return;
  }
  nccl_all_reduce ops;
  const per_replica<tensor> value{
    std::vector<tensor>{ramp(1000, gpu(0)), ramp(1000, second_physical())}};
  auto doubled = ramp(1000, host);
  add_into(doubled, ramp(1000, host));
  CHECK(same_bytes(ops.reduce(reduce_op::sum, value, value)[0], doubled)); // communicator made
  detail::inject_nccl_async_error(ncclInternalError);
  const auto message = error_of<device_error>([&] { ops.reduce(reduce_op::sum, value, value); });
  CHECK(has(message, "nccl_all_reduce of 1 tensor on CUDA devices 0, 1"));
  CHECK(has(message, "ncclCommAbort"));
  const auto after = ops.reduce(reduce_op::sum, value, value);
  CHECK(same_bytes(after[0], doubled));
  CHECK(same_bytes(after[1], doubled));
}

// Last: the collective that timed out stays queued behind the host
// function, on an aborted communicator.
TEST_CASE("a collective on a blocked stream times out: timeout_error, the communicator aborted") {
  logical();
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  if (physical_gpu_count() >= 2) {
    nccl_all_reduce ops{{.timeout = 200ms}};
    const per_replica<tensor> value{
      std::vector<tensor>{ramp(1000, gpu(0)), ramp(1000, second_physical())}};
    ops.reduce(reduce_op::sum, value, value); // the communicator exists
    blocked_stream blocked{detail::place_of(gpu(0)).stream};
    const auto t0 = std::chrono::steady_clock::now();
    message = error_of<timeout_error>([&] { ops.reduce(reduce_op::sum, value, value); });
    MESSAGE("nccl_all_reduce timed out after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - t0)
                 .count()
            << " ms (200 ms timeout)");
    blocked.release();
    CHECK(has(message, "nccl_all_reduce of 1 tensor"));
  } else {
    auto comm = single_rank_communicator();
    const auto in = ramp(1000, gpu(0));
    auto out = tensor::zeros(dtype::f32, {1000}, gpu(0));
    watched_all_reduce(comm, in, out, 30s); // the communicator works
    blocked_stream blocked{detail::place_of(gpu(0)).stream};
    const auto t0 = std::chrono::steady_clock::now();
    message = error_of<timeout_error>([&] { watched_all_reduce(comm, in, out, 200ms); });
    MESSAGE("the single-rank all-reduce timed out after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - t0)
                 .count()
            << " ms (200 ms timeout; the stream is released after 5 s at the latest)");
    blocked.release();
    CHECK(has(message, "a single-rank test all-reduce"));
  }
  CHECK(has(message, "not finished after the timeout"));
  CHECK(has(message, "ncclCommAbort"));
  CHECK(std::chrono::steady_clock::now() - start < 60s);
}

#else

TEST_CASE("lockstep without NCCL: nccl_all_reduce cannot be made") {
  CHECK_THROWS_AS(lockstep::nccl_all_reduce{}, lockstep::device_error);
}

#endif

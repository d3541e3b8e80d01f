#pragma once

// The logical GPUs of this process: what `/gpu:<k>` means to the CUDA
// kind. Logical GPU k lives on one physical CUDA device (the runtime's
// numbering, so CUDA_VISIBLE_DEVICES applies) and owns a CUDA stream, a
// caching pool of device memory and pinned host staging buffers. By
// default each physical device is one logical GPU; as TF's logical device
// configuration does, `configure_logical_gpus` splits a physical device
// into several, so K replicas share one GPU, each with its own stream and
// memory. Logical GPUs are numbered physical device by physical device.
//
// Everything that touches a logical GPU's buffers is ordered in its stream:
// kernels and copies are launched on it, and work of another stream on its
// buffers is joined in with events (join_streams), never with a
// device-wide synchronize. So a freed block may be reused by the next
// allocation at once: the pool's reuse is in stream order.
//
// The layout is fixed by the first GPU tensor (TF: "virtual devices cannot
// be modified after being initialized"); the places live until the process
// ends, because buffers may outlive static destructors.

#include "devices/caching_pool.hpp"
#include "lockstep/device_spec.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::detail {

/// Pinned host buffers through which host memory goes to and from one
/// logical GPU in pipelined chunks (two, so one is filled while the other
/// is on the copy engine).
struct staging_buffers {
  static constexpr std::size_t chunk_bytes = 4 * 1024 * 1024;
  std::mutex mutex;
  void* chunks[2] = {nullptr, nullptr};
  /// Recorded after the last copy that used each chunk.
  cudaEvent_t done[2] = {nullptr, nullptr};
};

struct cuda_place {
  int logical = 0;
  int physical = 0;
  /// "/job:localhost/replica:0/task:0/device:GPU:<logical>".
  device_spec device;
  cudaStream_t stream = nullptr;
  std::unique_ptr<caching_pool> pool;
  staging_buffers staging;
  /// Recorded on `stream` to join its work into another stream.
  std::mutex join_mutex;
  cudaEvent_t join_event = nullptr;
};

/// Sets the CUDA device of the calling thread for its lifetime, then
/// restores the previous one.
class cuda_device_guard {
public:
  explicit cuda_device_guard(int device);
  ~cuda_device_guard();
  cuda_device_guard(const cuda_device_guard&) = delete;
  cuda_device_guard& operator=(const cuda_device_guard&) = delete;

private:
  int previous_ = -1;
};

/// Physical devices this process may use (cuda_device_count, read once).
int physical_cuda_devices() noexcept;

/// Makes physical device `physical` hold `count` logical GPUs. Throws
/// value_error for a count below 1 or above 64, device_error for a
/// physical device that does not exist, and for another count once the
/// layout is in use or logical_gpus_of handed out this device's or a later
/// one's GPUs (their numbers would change).
void configure_logical_gpus(int physical, int count);

/// The logical GPUs of physical device `physical` (their canonical specs):
/// from then on the counts of it and of the devices before it are fixed.
/// Throws device_error for a physical device that does not exist.
std::vector<device_spec> logical_gpus_of(int physical);

/// How many logical GPUs there are (0 without devices).
int logical_gpu_count();

/// The place of `device` (a GPU spec, index set). Throws device_error
/// naming the device and the GPUs there are when it does not exist.
cuda_place& place_of(const device_spec& device);

/// The place whose pool holds `memory`, or null.
cuda_place* place_holding(const void* memory);

/// Work enqueued on `from.stream` so far happens before anything enqueued
/// on `to.stream` from now on (an event, no host wait). A no-op when both
/// are one place.
void join_streams(cuda_place& from, cuda_place& to);

/// Waits on the host until `event` has happened; throws timeout_error
/// naming `what` after `timeout`, device_error if the device failed.
void wait_for_event(cudaEvent_t event, std::string_view what,
                    std::chrono::milliseconds timeout = std::chrono::minutes{5});

/// Waits on the host until every task enqueued on `place.stream` so far
/// has run (an event recorded now and waited for, with the timeout of
/// wait_for_event).
void synchronize_place(cuda_place& place, std::string_view what);

} // namespace lockstep::detail

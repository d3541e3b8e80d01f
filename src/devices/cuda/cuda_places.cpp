#include "devices/cuda/cuda_places.hpp"

#include "devices/cuda/cuda_check.hpp"
#include "lockstep/error.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

namespace lockstep::detail {

namespace {

struct layout {
  std::mutex mutex;
  std::map<int, int> counts; // physical device -> logical GPUs (default 1)
  /// The highest physical device whose logical GPUs gpu_devices handed out
  /// (-1: none): the numbers of those may no longer change.
  int handed_out_up_to = -1;
  /// Set (release) once `places` is complete; from then on `places` is
  /// read without the mutex.
  std::atomic<bool> fixed{false};
  std::vector<cuda_place*> places; // never freed: buffers may outlive statics
};

layout& the_layout() {
  static auto* instance = new layout;
  return *instance;
}

/// Gives back the cached blocks of the other logical GPUs of `place`'s
/// physical device (its own pool does that itself); true if any were.
bool release_neighbours(const cuda_place& place) {
  std::size_t released = 0;
  for (auto* other : the_layout().places) // complete: pools exist once the layout is fixed
    if (other != &place && other->physical == place.physical)
      released += other->pool->try_release_cached();
  return released != 0;
}

void* device_allocate(void* context, std::size_t bytes) {
  const auto& place = *static_cast<const cuda_place*>(context);
  cuda_device_guard guard{place.physical};
  void* memory = nullptr;
  auto code = cudaMalloc(&memory, bytes);
  if (code == cudaErrorMemoryAllocation && release_neighbours(place)) {
    (void) cudaGetLastError();
    code = cudaMalloc(&memory, bytes);
  }
  if (code == cudaErrorMemoryAllocation) {
    (void) cudaGetLastError();
    return nullptr; // the pool gives its own cache back and tries once more
  }
  if (code != cudaSuccess)
    throw_cuda_error(code, "cudaMalloc(&memory, bytes)", __FILE__, __LINE__);
  return memory;
}

void device_free(void* context, void* memory) noexcept {
  const auto& place = *static_cast<const cuda_place*>(context);
  cuda_device_keeper keeper; // errors ignored: at teardown the driver may be gone
  if (cudaSetDevice(place.physical) == cudaSuccess)
    (void) cudaFree(memory);
}

cuda_place* make_place(int logical, int physical) {
  auto* place = new cuda_place;
  place->logical = logical;
  place->physical = physical;
  place->device = device_spec{"/gpu:" + std::to_string(logical)}.canonical();
  cuda_device_guard guard{physical};
  LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithFlags(&place->stream, cudaStreamNonBlocking));
  LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&place->join_event, cudaEventDisableTiming));
  for (int i = 0; i < 2; ++i) {
    LOCKSTEP_CUDA_CHECK(cudaMallocHost(&place->staging.chunks[i], staging_buffers::chunk_bytes));
    LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&place->staging.done[i], cudaEventDisableTiming));
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(place->staging.done[i], place->stream));
  }
  place->pool = std::make_unique<caching_pool>(
    raw_memory{device_allocate, device_free, place},
    "CUDA memory of " + place->device.to_string() + " (physical device "
      + std::to_string(physical) + ")");
  return place;
}

int count_of(const layout& l, int physical) {
  const auto found = l.counts.find(physical);
  return found == l.counts.end() ? 1 : found->second;
}

/// The logical number of physical device `physical`'s first GPU.
int first_logical_of(const layout& l, int physical) {
  int first = 0;
  for (int p = 0; p < physical; ++p)
    first += count_of(l, p);
  return first;
}

/// The places, created on first use. A failure leaves the layout unfixed,
/// to be tried again (the places made before it are not reclaimed).
const std::vector<cuda_place*>& fixed_places(layout& l) {
  if (l.fixed.load(std::memory_order_acquire))
    return l.places;
  std::lock_guard guard{l.mutex};
  if (l.fixed.load(std::memory_order_relaxed))
    return l.places;
  std::vector<cuda_place*> made;
  for (int p = 0; p < physical_cuda_devices(); ++p)
    for (int k = 0; k < count_of(l, p); ++k)
      made.push_back(make_place(static_cast<int>(made.size()), p));
  l.places = std::move(made);
  l.fixed.store(true, std::memory_order_release);
  return l.places;
}

std::string gpus_there_are(const layout& l) {
  return std::to_string(l.places.size()) + " logical GPU"
         + (l.places.size() == 1 ? "" : "s") + " on "
         + std::to_string(physical_cuda_devices()) + " CUDA device"
         + (physical_cuda_devices() == 1 ? "" : "s");
}

} // namespace

cuda_device_guard::cuda_device_guard(int device) {
  LOCKSTEP_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device)
    LOCKSTEP_CUDA_CHECK(cudaSetDevice(device));
}

cuda_device_guard::~cuda_device_guard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_)
    (void) cudaSetDevice(previous_);
  (void) cudaGetLastError();
}

int physical_cuda_devices() noexcept {
  static const int count = cuda_device_count();
  return count;
}

void configure_logical_gpus(int physical, int count) {
  if (count < 1 || count > 64)
    throw value_error("configure_logical_gpus: " + std::to_string(count)
                      + " logical GPUs per device; between 1 and 64 are possible");
  if (physical < 0 || physical >= physical_cuda_devices())
    throw device_error("configure_logical_gpus: there is no CUDA device "
                       + std::to_string(physical) + " (this process sees "
                       + std::to_string(physical_cuda_devices())
                       + "; CUDA_VISIBLE_DEVICES applies)");
  auto& l = the_layout();
  std::lock_guard guard{l.mutex};
  const int current = count_of(l, physical);
  if (current != count && (l.fixed || physical <= l.handed_out_up_to))
    throw device_error("configure_logical_gpus: CUDA device " + std::to_string(physical)
                       + " already serves " + std::to_string(current)
                       + " logical GPUs, and logical GPUs cannot be changed once a GPU was"
                         " used or their devices were handed out; configure them before the"
                         " first GPU tensor, physical device by physical device");
  l.counts[physical] = count;
}

std::vector<device_spec> logical_gpus_of(int physical) {
  if (physical < 0 || physical >= physical_cuda_devices())
    throw device_error("there is no CUDA device " + std::to_string(physical)
                       + " (this process sees " + std::to_string(physical_cuda_devices()) + ")");
  auto& l = the_layout();
  std::lock_guard guard{l.mutex};
  l.handed_out_up_to = std::max(l.handed_out_up_to, physical);
  const int first = first_logical_of(l, physical);
  std::vector<device_spec> devices;
  for (int k = 0; k < count_of(l, physical); ++k)
    devices.push_back(device_spec{"/gpu:" + std::to_string(first + k)}.canonical());
  return devices;
}

int logical_gpu_count() {
  auto& l = the_layout();
  std::lock_guard guard{l.mutex};
  return first_logical_of(l, physical_cuda_devices());
}

cuda_place& place_of(const device_spec& device) {
  auto& l = the_layout();
  const auto& places = fixed_places(l);
  const auto index = device.device_index();
  if (!device.is_gpu() || !index || *index < 0
      || static_cast<std::size_t>(*index) >= places.size())
    throw device_error("no CUDA memory for device " + device.to_string() + ": this process has "
                       + gpus_there_are(l) + " (CUDA_VISIBLE_DEVICES applies; "
                       "configure_logical_gpus or gpu_devices splits a device)");
  return *places[static_cast<std::size_t>(*index)];
}

cuda_place* place_holding(const void* memory) {
  auto& l = the_layout();
  if (!l.fixed.load(std::memory_order_acquire))
    return nullptr;
  for (auto* place : l.places)
    if (place->pool->owns(memory))
      return place;
  return nullptr;
}

void join_streams(cuda_place& from, cuda_place& to) {
  if (&from == &to)
    return;
  std::lock_guard guard{from.join_mutex};
  {
    cuda_device_guard device{from.physical};
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(from.join_event, from.stream));
  }
  cuda_device_guard device{to.physical};
  LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(to.stream, from.join_event, 0));
}

void wait_for_event(cudaEvent_t event, std::string_view what, std::chrono::milliseconds timeout) {
  // Polls instead of cudaEventSynchronize, which has no timeout: a short
  // spin for small copies, then sleeps of 50 microseconds.
  const auto start = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    const auto code = cudaEventQuery(event);
    if (code == cudaSuccess)
      return;
    if (code != cudaErrorNotReady)
      throw_cuda_error(code, "cudaEventQuery(event)", __FILE__, __LINE__);
    (void) cudaGetLastError(); // "not ready" stays the last error otherwise
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited > timeout)
      throw timeout_error(std::string{what} + ": the GPU did not finish within "
                          + std::to_string(timeout.count()) + " ms");
    if (polls < 200)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds{50});
  }
}

void synchronize_place(cuda_place& place, std::string_view what) {
  cudaEvent_t event = nullptr;
  cuda_device_guard device{place.physical};
  LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  try {
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(event, place.stream));
    wait_for_event(event, what);
  } catch (...) {
    (void) cudaEventDestroy(event);
    throw;
  }
  (void) cudaEventDestroy(event);
}

} // namespace lockstep::detail

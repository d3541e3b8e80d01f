// lockstep/gpu.hpp: over the CUDA backend's logical GPUs where it is built,
// and "no GPU" where it is not.

#include "lockstep/gpu.hpp"

#include "lockstep/config.hpp"
#include "lockstep/error.hpp"

#if LOCKSTEP_HAVE_CUDA
#include "devices/cuda/cuda_places.hpp"
#endif

namespace lockstep {

#if LOCKSTEP_HAVE_CUDA

int gpu_count() {
  return detail::logical_gpu_count();
}

int physical_gpu_count() {
  return detail::physical_cuda_devices();
}

std::vector<device_spec> gpu_devices(int count, int physical) {
  detail::configure_logical_gpus(physical, count);
  return detail::logical_gpus_of(physical);
}

gpu_memory_stats memory_stats(const device_spec& gpu) {
  const auto s = detail::place_of(gpu.canonical()).pool->statistics();
  return {.bytes_in_use = s.bytes_in_use,
          .peak_bytes_in_use = s.peak_bytes_in_use,
          .bytes_cached = s.bytes_cached,
          .allocations = s.allocations,
          .device_allocations = s.device_allocations};
}

void reset_peak_memory_stats(const device_spec& gpu) {
  detail::place_of(gpu.canonical()).pool->reset_peak();
}

std::size_t release_cached_memory(const device_spec& gpu) {
  auto& place = detail::place_of(gpu.canonical());
  detail::synchronize_place(place, "release_cached_memory");
  return place.pool->release_cached();
}

#else

namespace {

[[noreturn]] void no_gpu(std::string_view call) {
  throw device_error(std::string{call}
                     + ": lockstep was built without the CUDA backend (meson option cuda)");
}

} // namespace

int gpu_count() {
  return 0;
}

int physical_gpu_count() {
  return 0;
}

std::vector<device_spec> gpu_devices(int, int) {
  no_gpu("gpu_devices");
}

gpu_memory_stats memory_stats(const device_spec&) {
  no_gpu("memory_stats");
}

void reset_peak_memory_stats(const device_spec&) {
  no_gpu("reset_peak_memory_stats");
}

std::size_t release_cached_memory(const device_spec&) {
  no_gpu("release_cached_memory");
}

#endif

} // namespace lockstep

#include "devices/cuda/cuda_copies.hpp"

#include "devices/cuda/cuda_check.hpp"
#include "devices/cuda/cuda_places.hpp"

#include <algorithm>
#include <cstring>

namespace lockstep::detail {

namespace {

constexpr auto chunk_bytes = staging_buffers::chunk_bytes;

std::byte* chunk(staging_buffers& staging, std::size_t i) {
  return static_cast<std::byte*>(staging.chunks[i % 2]);
}

} // namespace

void copy_host_to_cuda(const device_spec& to, void* destination, const device_spec&,
                       const void* source, std::size_t bytes) {
  auto& place = place_of(to);
  auto& staging = place.staging;
  cuda_device_guard device{place.physical};
  std::lock_guard guard{staging.mutex};
  const auto* in = static_cast<const std::byte*>(source);
  auto* out = static_cast<std::byte*>(destination);
  for (std::size_t offset = 0, i = 0; offset < bytes; offset += chunk_bytes, ++i) {
    const auto length = std::min(chunk_bytes, bytes - offset);
    auto& done = staging.done[i % 2];
    wait_for_event(done, "a copy to " + place.device.to_string() + " (its staging buffer)");
    std::memcpy(chunk(staging, i), in + offset, length);
    LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(out + offset, chunk(staging, i), length,
                                        cudaMemcpyHostToDevice, place.stream));
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(done, place.stream));
  }
}

void copy_cuda_to_host(const device_spec&, void* destination, const device_spec& from,
                       const void* source, std::size_t bytes) {
  auto& place = place_of(from);
  auto& staging = place.staging;
  cuda_device_guard device{place.physical};
  std::lock_guard guard{staging.mutex};
  const auto* in = static_cast<const std::byte*>(source);
  auto* out = static_cast<std::byte*>(destination);
  const auto what = "a copy from " + place.device.to_string() + " to the host";
  const auto chunks = (bytes + chunk_bytes - 1) / chunk_bytes;
  // Chunk i goes out to the host while chunk i + 1 comes in.
  const auto land = [&](std::size_t i) {
    wait_for_event(staging.done[i % 2], what);
    const auto offset = i * chunk_bytes;
    std::memcpy(out + offset, chunk(staging, i), std::min(chunk_bytes, bytes - offset));
  };
  for (std::size_t i = 0; i < chunks; ++i) {
    const auto offset = i * chunk_bytes;
    wait_for_event(staging.done[i % 2], what); // chunk i - 2 has landed already
    LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(chunk(staging, i), in + offset,
                                        std::min(chunk_bytes, bytes - offset),
                                        cudaMemcpyDeviceToHost, place.stream));
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(staging.done[i % 2], place.stream));
    if (i >= 1)
      land(i - 1);
  }
  if (chunks >= 1)
    land(chunks - 1);
}

void copy_cuda_to_cuda(const device_spec& to, void* destination, const device_spec& from,
                       const void* source, std::size_t bytes) {
  if (bytes == 0 || destination == source)
    return;
  auto& target = place_of(to);
  auto& origin = place_of(from);
  join_streams(origin, target);
  {
    cuda_device_guard device{target.physical};
    if (origin.physical == target.physical)
      LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice,
                                          target.stream));
    else
      LOCKSTEP_CUDA_CHECK(cudaMemcpyPeerAsync(destination, target.physical, source,
                                              origin.physical, bytes, target.stream));
  }
  join_streams(target, origin);
}

} // namespace lockstep::detail

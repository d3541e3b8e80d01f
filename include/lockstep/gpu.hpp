#pragma once

/// GPUs: which ones this process has, TF's logical GPUs (several replicas
/// on one physical GPU, each with its own stream and memory), and their
/// memory statistics. With the CUDA backend (LOCKSTEP_HAVE_CUDA) and a CUDA
/// device, `/gpu:<k>` tensors live in CUDA memory of logical GPU k;
/// without either, GPU devices are host memory labelled GPU and these calls
/// say there is no GPU (docs/gpu.md).

#include "lockstep/device_spec.hpp"

#include <cstddef>
#include <vector>

namespace lockstep {

/// The logical GPUs of this process (0 without the CUDA backend or a CUDA
/// device; CUDA_VISIBLE_DEVICES applies), as configured so far.
int gpu_count();

/// The physical CUDA devices this process sees (0 without either).
int physical_gpu_count();

/// TF's `set_logical_device_configuration` and `list_logical_devices`:
/// makes physical GPU `physical` serve `count` logical GPUs, each with its
/// own CUDA stream and memory pool, and returns their devices
/// (`/gpu:<k>`, numbered physical device by physical device, so configure
/// physical device 0 first). Must come before the first GPU tensor; once
/// a physical device's GPUs were handed out, its count and those before it
/// may only be repeated. Throws value_error for a count outside 1..64,
/// device_error without such a physical GPU or for a change that comes
/// too late.
std::vector<device_spec> gpu_devices(int count, int physical = 0);

/// The caching allocator of one logical GPU (TF's
/// `get_memory_info`, PyTorch's `memory_stats`). Bytes count whole
/// allocator blocks (rounded up to 512 bytes, or 2 MiB above 1 MiB).
struct gpu_memory_stats {
  std::size_t bytes_in_use = 0;
  std::size_t peak_bytes_in_use = 0;
  /// Freed blocks kept for reuse.
  std::size_t bytes_cached = 0;
  /// Buffers handed out, and how many of them needed a new cudaMalloc.
  std::size_t allocations = 0;
  std::size_t device_allocations = 0;
};

/// The statistics of `gpu` (a logical GPU). Throws device_error when it
/// does not exist.
gpu_memory_stats memory_stats(const device_spec& gpu);

/// Starts the peak of `gpu` again from its bytes in use (TF's
/// `reset_memory_stats`).
void reset_peak_memory_stats(const device_spec& gpu);

/// Gives the cached blocks of `gpu` back to the device (PyTorch's
/// `empty_cache`); returns their bytes. Synchronizes the device: not for a
/// training step's loop.
std::size_t release_cached_memory(const device_spec& gpu);

} // namespace lockstep

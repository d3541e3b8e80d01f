#pragma once

// caching_pool: the caching allocator of a device's memory (the CUDA
// kind's, one pool per logical GPU), kept apart from the device API so its
// bookkeeping is tested without a device. As TF's BFC allocator and
// PyTorch's caching allocator do, a freed block is kept for the next buffer
// of its size class instead of going back to the device: a training step
// allocates the same sizes every step, and a device allocation (cudaMalloc)
// costs tens of microseconds and synchronizes the device.
//
// Sizes round up to a class: a multiple of 512 bytes up to 1 MiB, of 2 MiB
// above. A class's free blocks are reused last freed first. When the device
// is out of memory, the pool gives every cached block back and tries once
// more before it throws device_error. Safe reuse across streams is the
// caller's part: a CUDA pool's blocks are reused in its logical GPU's
// stream order, and work of other streams on a block is joined into that
// stream (join_streams, cuda/cuda_places.hpp). Thread-safe.

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace lockstep::detail {

/// The device memory behind a pool: `allocate` returns null when the
/// device is out of memory (and throws for other failures); `free` gives a
/// block back.
struct raw_memory {
  void* (*allocate)(void* context, std::size_t bytes) = nullptr;
  void (*free)(void* context, void* memory) noexcept = nullptr;
  void* context = nullptr;
};

/// What a pool holds (bytes count whole classes).
struct pool_statistics {
  /// Bytes of the blocks that buffers hold now.
  std::size_t bytes_in_use = 0;
  /// The most bytes_in_use has been since the start or the last reset_peak.
  std::size_t peak_bytes_in_use = 0;
  /// Bytes of free blocks kept for reuse.
  std::size_t bytes_cached = 0;
  /// Buffers handed out, and how many of them needed a new device block.
  std::size_t allocations = 0;
  std::size_t device_allocations = 0;
  /// Blocks given back to the device (out of memory, release_cached).
  std::size_t device_frees = 0;
};

class caching_pool {
public:
  static constexpr std::size_t small_class = 512;
  static constexpr std::size_t large_class = 2 * 1024 * 1024;
  static constexpr std::size_t small_max = 1024 * 1024;

  /// `name` names the pool's device in errors ("CUDA memory of /gpu:1").
  caching_pool(raw_memory raw, std::string name);

  /// Gives every free block back; blocks still in use are left to the
  /// device's teardown (buffers may outlive the pool at process exit).
  ~caching_pool();

  caching_pool(const caching_pool&) = delete;
  caching_pool& operator=(const caching_pool&) = delete;

  /// The class a buffer of `bytes` bytes takes (0 bytes take the smallest).
  static std::size_t class_size(std::size_t bytes) noexcept;

  /// A block of at least `bytes` bytes. Throws device_error, naming the
  /// device and the pool's figures, when the device has no room even
  /// after the cached blocks were given back.
  void* allocate(std::size_t bytes);

  /// Keeps `memory` for reuse; false (and nothing done) when it is not a
  /// block of this pool in use.
  bool free(void* memory) noexcept;

  /// True when `memory` is a block of this pool in use.
  bool owns(const void* memory) const;

  pool_statistics statistics() const;

  /// Starts peak_bytes_in_use again from bytes_in_use.
  void reset_peak() noexcept;

  /// Gives every cached block back to the device; returns the bytes freed.
  std::size_t release_cached() noexcept;

  /// release_cached, unless another thread holds the pool (then 0): for a
  /// neighbouring pool on the same device that ran out of memory while
  /// holding its own lock, so two such pools never wait for each other.
  std::size_t try_release_cached() noexcept;

private:
  std::size_t release_cached_locked() noexcept;

  const raw_memory raw_;
  const std::string name_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, std::size_t> in_use_;       // block -> class
  std::unordered_map<std::size_t, std::vector<void*>> cached_; // class -> blocks
  pool_statistics statistics_;
};

} // namespace lockstep::detail

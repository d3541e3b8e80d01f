#pragma once

// Host memory for tensor buffers of a page up to pooled_max bytes, kept
// apart from the process's small heap objects. From glibc's heap, a 4 KiB
// buffer sits between the tensor objects' own allocations (the shape, the
// buffer's control block), and an all-reduce of 1000 such buffers reached
// half the bandwidth of one over a 4 MiB buffer; back to back, away from
// the small objects, they reach about 0.8 of it (docs/algorithms.md).
//
// Sizes are rounded up to a class (a multiple of 4 KiB); a class's blocks
// are carved from 2 MiB slabs, page-aligned, one after the other, and a
// freed block waits for the next buffer of that class, lowest address
// first.
// Slabs are kept for the life of the process, as TF's BFC allocator and
// PyTorch's caching allocator keep theirs: the pool holds at most the peak
// of each class's live buffers. Buffers outside the pooled range come from
// the aligned operator new. Thread-safe; a buffer may be freed by any
// thread. Under AddressSanitizer, free blocks and a block's tail beyond the
// requested size are poisoned.

#include <cstddef>

namespace lockstep::detail {

class host_pool {
public:
  /// The alignment of every buffer: a cache line, and wide enough for every
  /// vector load on x86-64 and ARM. Pooled buffers are also page-aligned.
  static constexpr std::size_t alignment = 64;
  static constexpr std::size_t pooled_min = 4096;
  static constexpr std::size_t pooled_max = 256 * 1024;
  static constexpr std::size_t slab_bytes = 2 * 1024 * 1024;

  /// The process's pool, never destroyed (buffers may outlive static
  /// destructors).
  static host_pool& instance();

  /// The size a buffer of `bytes` bytes takes in the pool: its class, or
  /// `bytes` itself outside the pooled range.
  static std::size_t class_size(std::size_t bytes) noexcept;

  /// `bytes` bytes aligned to `alignment`. Throws std::bad_alloc.
  void* allocate(std::size_t bytes);

  /// Returns a buffer from `allocate(bytes)` with the same `bytes`.
  void free(void* memory, std::size_t bytes) noexcept;

  /// Blocks of `bytes`' class waiting for reuse (for tests).
  std::size_t free_blocks(std::size_t bytes) const;

  host_pool();
  ~host_pool();
  host_pool(const host_pool&) = delete;
  host_pool& operator=(const host_pool&) = delete;

private:
  struct size_class;
  size_class* classes_;
};

} // namespace lockstep::detail

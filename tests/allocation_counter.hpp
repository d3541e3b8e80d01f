#pragma once

// Counts the bytes a test binary has allocated through operator new, so a
// test can assert that reading hostile input allocates no more than its
// valid header promises. Include it in exactly one source file of a test
// binary: it replaces the global operator new and delete of that binary.
// Under AddressSanitizer the sanitizer's own operators win at link time in
// some setups; `allocation_counter::active()` tells a test whether its
// figures mean anything.

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

// This operator delete frees with std::free what this operator new took
// with malloc; GCC, seeing a pointer from operator new reach free, reports
// a mismatch that is not one here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace allocation_counter {

inline std::atomic<std::size_t> current{0};
inline std::atomic<std::size_t> peak{0};
inline std::atomic<bool> seen{false};

/// Starts a new measurement: the peak becomes what is live now.
inline void reset_peak() {
  peak.store(current.load());
}

/// Bytes allocated at most at once since `reset_peak`, beyond those live
/// at that moment.
inline std::size_t peak_since(std::size_t baseline) {
  const auto high = peak.load();
  return high > baseline ? high - baseline : 0;
}

/// True once the counting operator new has run in this binary.
inline bool active() {
  return seen.load();
}

inline void* allocate(std::size_t size, std::size_t alignment) {
  void* p = alignment <= alignof(std::max_align_t)
              ? std::malloc(size == 0 ? 1 : size)
              : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (p == nullptr)
    return nullptr;
  // malloc_usable_size: delete learns the size from the block itself.
  const auto now = current.fetch_add(malloc_usable_size(p)) + malloc_usable_size(p);
  auto high = peak.load();
  while (now > high && !peak.compare_exchange_weak(high, now)) {
  }
  seen.store(true, std::memory_order_relaxed);
  return p;
}

inline void release(void* p) noexcept {
  if (p == nullptr)
    return;
  current.fetch_sub(malloc_usable_size(p));
  std::free(p);
}

} // namespace allocation_counter

void* operator new(std::size_t size) {
  if (void* p = allocation_counter::allocate(size, alignof(std::max_align_t)))
    return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  return operator new(size);
}
void* operator new(std::size_t size, std::align_val_t alignment) {
  if (void* p = allocation_counter::allocate(size, static_cast<std::size_t>(alignment)))
    return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
  return operator new(size, alignment);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return allocation_counter::allocate(size, alignof(std::max_align_t));
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return allocation_counter::allocate(size, alignof(std::max_align_t));
}
void operator delete(void* p) noexcept {
  allocation_counter::release(p);
}
void operator delete[](void* p) noexcept {
  allocation_counter::release(p);
}
void operator delete(void* p, std::size_t) noexcept {
  allocation_counter::release(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  allocation_counter::release(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  allocation_counter::release(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  allocation_counter::release(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  allocation_counter::release(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  allocation_counter::release(p);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

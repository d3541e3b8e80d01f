#include "devices/host/host_pool.hpp"

#include <algorithm>
#include <functional>
#include <mutex>
#include <new>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define LOCKSTEP_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define LOCKSTEP_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define LOCKSTEP_POISON(p, n) ((void)(p), (void)(n))
#define LOCKSTEP_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace lockstep::detail {

namespace {

constexpr std::size_t page = 4096;
constexpr std::size_t fine_max = 64 * 1024; // classes every page up to here
constexpr std::size_t fine_classes = fine_max / page;
constexpr std::size_t steps_per_doubling = 4; // beyond: 80, 96, 112, 128, 160, ... KiB
constexpr std::size_t class_count = fine_classes + 2 * steps_per_doubling; // up to 256 KiB
constexpr std::align_val_t slab_alignment{page};

std::size_t floor_log2(std::size_t x) noexcept {
  return static_cast<std::size_t>(63 - __builtin_clzll(x));
}

/// The class of `bytes`, within [pooled_min, pooled_max].
std::size_t class_index(std::size_t bytes) noexcept {
  if (bytes <= fine_max)
    return (bytes + page - 1) / page - 1;
  const auto k = floor_log2(bytes - 1); // bytes in (2^k, 2^(k+1)]
  const auto base = std::size_t{1} << k;
  const auto step = base / steps_per_doubling;
  return fine_classes + (k - floor_log2(fine_max)) * steps_per_doubling
         + (bytes - base + step - 1) / step - 1;
}

std::size_t size_of_class(std::size_t index) noexcept {
  if (index < fine_classes)
    return (index + 1) * page;
  const auto j = index - fine_classes;
  const auto base = fine_max << (j / steps_per_doubling);
  return base + (j % steps_per_doubling + 1) * (base / steps_per_doubling);
}

bool pooled(std::size_t bytes) noexcept {
  return bytes >= host_pool::pooled_min && bytes <= host_pool::pooled_max;
}

} // namespace

struct host_pool::size_class {
  std::mutex mutex;
  // A min-heap on address, with room for every block carved: the lowest
  // free block is reused first, so buffers allocated one after another lie
  // in ascending order, whatever order they were freed in (a batch freed
  // and allocated again streams through memory as it did the first time).
  std::vector<std::byte*> free;
  std::size_t carved = 0;
  std::byte* next = nullptr;     // the current slab's first uncarved byte
  std::byte* end = nullptr;
  std::vector<std::byte*> slabs; // kept for the life of the pool
};

host_pool& host_pool::instance() {
  static auto* pool = new host_pool;
  return *pool;
}

host_pool::host_pool() : classes_(new size_class[class_count]) {}

host_pool::~host_pool() {
  for (std::size_t i = 0; i < class_count; ++i)
    for (auto* slab : classes_[i].slabs)
      ::operator delete(slab, slab_alignment);
  delete[] classes_;
}

std::size_t host_pool::class_size(std::size_t bytes) noexcept {
  return pooled(bytes) ? size_of_class(class_index(bytes)) : bytes;
}

void* host_pool::allocate(std::size_t bytes) {
  if (!pooled(bytes))
    return ::operator new(bytes, std::align_val_t{alignment});
  const auto index = class_index(bytes);
  const auto size = size_of_class(index);
  auto& c = classes_[index];
  std::byte* block = nullptr;
  {
    std::lock_guard lock{c.mutex};
    if (!c.free.empty()) {
      std::pop_heap(c.free.begin(), c.free.end(), std::greater<>{});
      block = c.free.back();
      c.free.pop_back();
    } else {
      if (static_cast<std::size_t>(c.end - c.next) < size) {
        c.slabs.reserve(c.slabs.size() + 1); // so push_back cannot throw below
        auto* slab = static_cast<std::byte*>(::operator new(slab_bytes, slab_alignment));
        LOCKSTEP_POISON(slab, slab_bytes);
        c.slabs.push_back(slab);
        c.next = slab;
        c.end = slab + slab_bytes;
      }
      // Room on the free list for this block too, so free never allocates.
      if (c.free.capacity() <= c.carved)
        c.free.reserve(std::max(c.carved + 1, 2 * c.free.capacity()));
      block = c.next;
      c.next += size;
      ++c.carved;
    }
  }
  LOCKSTEP_UNPOISON(block, bytes);
  return block;
}

void host_pool::free(void* memory, std::size_t bytes) noexcept {
  if (memory == nullptr)
    return;
  if (!pooled(bytes)) {
    ::operator delete(memory, std::align_val_t{alignment});
    return;
  }
  const auto index = class_index(bytes);
  auto* block = static_cast<std::byte*>(memory);
  LOCKSTEP_POISON(block, size_of_class(index));
  auto& c = classes_[index];
  std::lock_guard lock{c.mutex};
  c.free.push_back(block); // within the capacity allocate reserved
  std::push_heap(c.free.begin(), c.free.end(), std::greater<>{});
}

std::size_t host_pool::free_blocks(std::size_t bytes) const {
  if (!pooled(bytes))
    return 0;
  auto& c = classes_[class_index(bytes)];
  std::lock_guard lock{c.mutex};
  return c.free.size();
}

} // namespace lockstep::detail

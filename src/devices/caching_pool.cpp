#include "devices/caching_pool.hpp"

#include "lockstep/error.hpp"

#include <algorithm>

namespace lockstep::detail {

caching_pool::caching_pool(raw_memory raw, std::string name)
  : raw_(raw), name_(std::move(name)) {
}

caching_pool::~caching_pool() {
  release_cached();
}

std::size_t caching_pool::class_size(std::size_t bytes) noexcept {
  const auto unit = bytes <= small_max ? small_class : large_class;
  return std::max(unit, (bytes + unit - 1) / unit * unit);
}

void* caching_pool::allocate(std::size_t bytes) {
  const auto size = class_size(bytes);
  std::lock_guard guard{mutex_};
  void* block = nullptr;
  if (auto found = cached_.find(size); found != cached_.end() && !found->second.empty()) {
    block = found->second.back();
    found->second.pop_back();
    statistics_.bytes_cached -= size;
  } else {
    block = raw_.allocate(raw_.context, size);
    if (block == nullptr && release_cached_locked() != 0)
      block = raw_.allocate(raw_.context, size);
    if (block == nullptr)
      throw device_error("out of memory: " + std::to_string(bytes) + " bytes in " + name_
                         + " (a block of " + std::to_string(size) + "; "
                         + std::to_string(statistics_.bytes_in_use)
                         + " bytes in use, the cache given back)");
    ++statistics_.device_allocations;
  }
  try {
    in_use_.emplace(block, size);
  } catch (...) { // no room to remember it: the block goes back to the device
    raw_.free(raw_.context, block);
    ++statistics_.device_frees;
    throw;
  }
  ++statistics_.allocations;
  statistics_.bytes_in_use += size;
  statistics_.peak_bytes_in_use = std::max(statistics_.peak_bytes_in_use,
                                           statistics_.bytes_in_use);
  return block;
}

bool caching_pool::free(void* memory) noexcept {
  std::lock_guard guard{mutex_};
  const auto found = in_use_.find(memory);
  if (found == in_use_.end())
    return false;
  const auto size = found->second;
  in_use_.erase(found);
  statistics_.bytes_in_use -= size;
  try {
    cached_[size].push_back(memory);
    statistics_.bytes_cached += size;
  } catch (...) { // no room to remember it: give it back instead
    raw_.free(raw_.context, memory);
    ++statistics_.device_frees;
  }
  return true;
}

bool caching_pool::owns(const void* memory) const {
  std::lock_guard guard{mutex_};
  return in_use_.contains(memory);
}

pool_statistics caching_pool::statistics() const {
  std::lock_guard guard{mutex_};
  return statistics_;
}

void caching_pool::reset_peak() noexcept {
  std::lock_guard guard{mutex_};
  statistics_.peak_bytes_in_use = statistics_.bytes_in_use;
}

std::size_t caching_pool::release_cached() noexcept {
  std::lock_guard guard{mutex_};
  return release_cached_locked();
}

std::size_t caching_pool::try_release_cached() noexcept {
  std::unique_lock guard{mutex_, std::try_to_lock};
  return guard.owns_lock() ? release_cached_locked() : 0;
}

std::size_t caching_pool::release_cached_locked() noexcept {
  std::size_t released = 0;
  for (auto& [size, blocks] : cached_) {
    for (auto* block : blocks) {
      raw_.free(raw_.context, block);
      ++statistics_.device_frees;
      released += size;
    }
    blocks.clear();
  }
  statistics_.bytes_cached = 0;
  return released;
}

} // namespace lockstep::detail

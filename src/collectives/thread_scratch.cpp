#include "collectives/thread_scratch.hpp"

#include <memory>
#include <new>

namespace lockstep::detail {

std::byte* thread_scratch(std::size_t bytes) {
  constexpr std::align_val_t alignment{64};
  struct aligned_delete {
    void operator()(std::byte* p) const { ::operator delete(p, alignment); }
  };
  thread_local std::unique_ptr<std::byte, aligned_delete> block;
  thread_local std::size_t size = 0;
  if (size < bytes) {
    block.reset(static_cast<std::byte*>(::operator new(bytes, alignment)));
    size = bytes;
  }
  return block.get();
}

} // namespace lockstep::detail

#pragma once

#include <cstddef>
#include <memory>

namespace lockstep {

/// A kind of device memory and the work on it (host memory, later CUDA
/// memory): its allocator, copies, executor and kernels. Opaque here; the
/// device registry of the library defines it.
struct device_kind;

/// A reference-counted buffer of one device kind's memory: a tensor's
/// storage. Copying the handle shares the buffer; the last handle frees it
/// through the kind's allocator. `data()` is an address in the kind's
/// memory: the host may read and write it only when `host_accessible()`.
class device_buffer {
public:
  /// No buffer.
  device_buffer() = default;

  /// Takes `memory` (`bytes` long, freed by its deleter through `kind`'s
  /// allocator). For device kinds' allocators; applications get buffers
  /// from tensors.
  device_buffer(std::shared_ptr<std::byte> memory, std::size_t bytes, const device_kind& kind,
                bool host_accessible)
    : memory_(std::move(memory)), bytes_(bytes), kind_(&kind), host_accessible_(host_accessible) {
  }

  /// The start of the buffer, in the kind's memory.
  std::byte* data() const noexcept { return memory_.get(); }

  /// The buffer's length in bytes.
  std::size_t bytes() const noexcept { return bytes_; }

  /// The kind of memory that holds the buffer (null for no buffer).
  const device_kind* kind() const noexcept { return kind_; }

  /// True when the host may read and write `data()` directly.
  bool host_accessible() const noexcept { return host_accessible_; }

  /// How many handles share the buffer (this one included).
  long use_count() const noexcept { return memory_.use_count(); }

  /// True when both handles share one buffer.
  friend bool operator==(const device_buffer& lhs, const device_buffer& rhs) noexcept {
    return lhs.memory_ == rhs.memory_;
  }

private:
  std::shared_ptr<std::byte> memory_;
  std::size_t bytes_ = 0;
  const device_kind* kind_ = nullptr;
  bool host_accessible_ = true;
};

} // namespace lockstep

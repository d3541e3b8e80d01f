#pragma once

// shared_segment: a POSIX shared-memory object (shm_open) mapped into this
// process, which worker processes of one host map to reach each other's
// buffers. The creator names it, the others open it by that name, learned
// over an authenticated connection; once every one has mapped it, the
// creator unlinks the name, so that nothing is left behind when the
// processes end, however they end (the mapping outlives the name).

#include <cstddef>
#include <optional>
#include <string>

namespace lockstep::detail {

class shared_segment {
public:
  /// A new object `name` ("/lockstep-..."), `bytes` long, zero-filled,
  /// readable and writable by this user only, mapped. Throws io_error
  /// naming it when it exists already or cannot be made or mapped
  /// (resource_error when /dev/shm is full).
  static shared_segment create(const std::string& name, std::size_t bytes);

  /// Maps the existing object `name` of exactly `bytes`; nothing when it
  /// cannot be opened (absent, not ours, another /dev/shm) or has another
  /// size: then this process does not share that memory.
  static std::optional<shared_segment> open(const std::string& name, std::size_t bytes);

  shared_segment(shared_segment&& other) noexcept;
  shared_segment& operator=(shared_segment&& other) noexcept;
  shared_segment(const shared_segment&) = delete;
  shared_segment& operator=(const shared_segment&) = delete;
  /// Unmaps; a creator that did not unlink the name unlinks it.
  ~shared_segment();

  /// Removes the name (the creator's; a no-op for the others and after
  /// the first call). The mappings stay valid.
  void unlink() noexcept;

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }

private:
  shared_segment(std::string name, std::byte* data, std::size_t size, bool owner) noexcept;

  std::string name_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool linked_ = false; // the creator's name is still there
};

/// Removes the name of another process's segment (one that may have died
/// before it could); a name already gone is no error.
void remove_segment_name(const std::string& name) noexcept;

/// A name for a new segment: "/lockstep-<prefix>-<16 random hex digits>",
/// unguessable, so that no other process opens it first.
std::string new_segment_name(const std::string& prefix);

} // namespace lockstep::detail

#include "devices/device_registry.hpp"

#include "lockstep/error.hpp"

#include "runtime/error_text.hpp"

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace lockstep::detail {

namespace {

struct registered_kind {
  std::string device_type;
  const device_kind* kind;
};

struct registered_copy {
  const device_kind* from;
  const device_kind* to;
  copy_function copy;
};

// Registration is rare (at start-up, in tests); lookups of the host kind,
// the common case, take no lock.
struct registry {
  std::mutex mutex;
  std::vector<registered_kind> kinds;
  std::vector<registered_copy> copies;
};

registry& the_registry() {
  static registry instance;
  return instance;
}

void host_copy(const device_spec&, void* destination, const device_spec&, const void* source,
               std::size_t bytes) {
  // Not memcpy with a null pointer: an empty buffer may have none.
  if (bytes != 0)
    std::memcpy(destination, source, bytes);
}

std::string kind_name(const device_kind& kind) {
  return std::string(kind.name);
}

} // namespace

void register_device_kind(std::string_view device_type, const device_kind& kind) {
  if (device_type == "CPU")
    throw value_error("register_device_kind: CPU devices are always host memory");
  auto& r = the_registry();
  std::lock_guard guard{r.mutex};
  for (const auto& entry : r.kinds)
    if (entry.device_type == device_type) {
      if (entry.kind == &kind)
        return;
      throw value_error("register_device_kind: device type " + in_quotes(device_type)
                        + " is already served by the " + kind_name(*entry.kind) + " kind");
    }
  r.kinds.push_back({std::string(device_type), &kind});
}

void unregister_device_kind(std::string_view device_type) {
  auto& r = the_registry();
  std::lock_guard guard{r.mutex};
  std::erase_if(r.kinds, [&](const auto& entry) { return entry.device_type == device_type; });
}

const device_kind& kind_of(const device_spec& device) {
  const auto& type = device.device_type();
  if (!type || *type == "CPU")
    return host_kind();
  {
    auto& r = the_registry();
    std::lock_guard guard{r.mutex};
    for (const auto& entry : r.kinds)
      if (entry.device_type == *type)
        return *entry.kind;
  }
  if (*type == "GPU")
    if (const auto* cuda = cuda_kind_if_present())
      return *cuda;
  // GPU without a CUDA device, TPU and other types: host memory.
  return host_kind();
}

void register_copy(const device_kind& from, const device_kind& to, copy_function copy) {
  auto& r = the_registry();
  std::lock_guard guard{r.mutex};
  for (auto& entry : r.copies)
    if (entry.from == &from && entry.to == &to) {
      entry.copy = copy;
      return;
    }
  r.copies.push_back({&from, &to, copy});
}

copy_function copy_between(const device_kind& from, const device_kind& to) {
  if (&from == &host_kind() && &to == &host_kind())
    return host_copy;
  auto& r = the_registry();
  {
    std::lock_guard guard{r.mutex};
    for (const auto& entry : r.copies)
      if (entry.from == &from && entry.to == &to)
        return entry.copy;
  }
  throw device_error("no copy from " + kind_name(from) + " memory to " + kind_name(to)
                     + " memory is registered");
}

device_buffer allocate_buffer(const device_kind& kind, const device_spec& device,
                              std::size_t bytes) {
  auto* memory = static_cast<std::byte*>(kind.allocate(device, bytes));
  return {std::shared_ptr<std::byte>(memory, [free = kind.free, bytes](std::byte* p) { free(p, bytes); }),
          bytes, kind, kind.host_accessible};
}

std::shared_ptr<device_executor> executor_of(const device_spec& device,
                                             std::chrono::microseconds spin) {
  const auto& kind = kind_of(device);
  if (kind.executor == nullptr)
    throw device_error("the " + kind_name(kind) + " device kind has no executor (device "
                       + device.to_string() + ")");
  return kind.executor(device, spin);
}

void throw_missing_kernel(const device_kind& kind, std::string_view kernel) {
  throw device_error(std::string(kernel) + ": the " + kind_name(kind)
                     + " device kind has no such kernel");
}

} // namespace lockstep::detail

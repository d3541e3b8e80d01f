// The host device kind: host memory from the host pool, the
// per-device executor thread, memcpy between host buffers (built into the
// registry) and the host kernels. It serves CPU devices and GPU-named
// devices where there is no CUDA device (host memory labelled GPU).

#include "lockstep/config.hpp"

#include "devices/device_executor.hpp"
#include "devices/device_registry.hpp"
#include "devices/host/host_kernels.hpp"
#include "devices/host/host_pool.hpp"

#include <cstring>

namespace lockstep::detail {

namespace {

void* host_allocate(const device_spec&, std::size_t bytes) {
  return host_pool::instance().allocate(bytes);
}

void host_free(void* memory, std::size_t bytes) noexcept {
  host_pool::instance().free(memory, bytes);
}

void host_zero(const device_spec&, void* memory, std::size_t bytes) {
  if (bytes != 0)
    std::memset(memory, 0, bytes);
}

constexpr device_kind host_memory{
  .name = "host",
  .host_accessible = true,
  .allocate = host_allocate,
  .free = host_free,
  .zero = host_zero,
  .executor = &device_executor::of,
  .domain = [](const device_spec&) { return 0; },
  .kernels = {.add = host::add,
              .subtract = host::subtract,
              .multiply = host::multiply,
              .min = host::min,
              .max = host::max,
              .copy = host::copy,
              .axpy = host::axpy,
              .scale = host::scale,
              .divide = host::divide,
              .reduce_sum_axis = host::reduce_sum_axis,
              .convert = host::convert,
              .reduce_buffers = host::reduce_buffers},
};

} // namespace

const device_kind& host_kind() noexcept {
  return host_memory;
}

#if !LOCKSTEP_HAVE_CUDA
const device_kind* cuda_kind_if_present() {
  return nullptr; // built without the CUDA backend
}
#endif

} // namespace lockstep::detail

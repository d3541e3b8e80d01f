#pragma once

// The device registry: for each kind of device memory (host, CUDA), what
// the library needs to work on it: an allocator, the executor that runs a
// device's work, copies to and from other kinds, and the table of tensor
// kernels. Tensors, copies and kernels find their kind here, by
// the device type of a device_spec: this is the one place that routes a
// device to its backend.
//
// The host kind (host/host_kind.cpp) serves "CPU" and every device type
// without a kind of its own; the CUDA kind (cuda/cuda_kind.cpp) serves
// "GPU" where lockstep has the CUDA backend and the process sees a device,
// and "/gpu:0" is host memory labelled GPU everywhere else. A kind is a
// plain struct of function pointers with static storage; registering one
// for a device type (tests register a simulated device memory) makes new
// tensors on that type use it.

#include "lockstep/device_buffer.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace lockstep::detail {

class device_executor;

/// The tensor kernels of one device kind (tensor.hpp documents each). The
/// public kernels check the dtypes and shapes, then call the entry of the
/// accumulator's kind; a null entry is an operation the kind lacks, which
/// fails with device_error naming the kind and the kernel.
struct kernel_table {
  using binary_kernel = void (*)(tensor& accumulator, const tensor& x);
  binary_kernel add = nullptr;
  binary_kernel subtract = nullptr;
  binary_kernel multiply = nullptr;
  binary_kernel min = nullptr;
  binary_kernel max = nullptr;
  /// `copy(destination, source)`: the elements of `source` into
  /// `destination`'s buffer, both of this kind.
  binary_kernel copy = nullptr;
  void (*axpy)(tensor& y, double factor, const tensor& x) = nullptr;
  void (*scale)(tensor& x, double factor) = nullptr;
  void (*divide)(tensor& x, std::int64_t divisor) = nullptr;
  tensor (*reduce_sum_axis)(const tensor& x, std::size_t axis) = nullptr;
  /// `convert(destination, source)`: float32 to float16/bfloat16 (rounded
  /// to nearest even) or back (exact), same shapes.
  binary_kernel convert = nullptr;
  /// One pass over `inputs` (one dtype and shape, at least one), combined
  /// with `op` in input order as the collectives combine (half types in
  /// float, MEAN divided by the input count, one rounding), the result
  /// written to every buffer of `outputs`, which may be inputs. All lie in
  /// one memory domain of the kind (device_kind::domain).
  void (*reduce_buffers)(reduce_op op, std::span<const tensor> inputs,
                         std::span<tensor> outputs) = nullptr;
};

/// Copies `bytes` bytes from `source` (a buffer of device `from`) to
/// `destination` (a buffer of device `to`), between buffers of two kinds
/// (host to host: memcpy; with CUDA memory: on the devices' streams, see
/// cuda/cuda_copies.cpp). The devices are canonical.
using copy_function = void (*)(const device_spec& to, void* destination, const device_spec& from,
                               const void* source, std::size_t bytes);

} // namespace lockstep::detail

namespace lockstep {

/// One kind of device memory and the work on it (device_buffer.hpp declares
/// it for the public API). Every function pointer is set unless noted.
struct device_kind {
  /// Names the kind in messages: "host", "cuda".
  std::string_view name;
  /// True when the host may read and write the kind's buffers directly.
  bool host_accessible = true;
  /// A buffer of `bytes` bytes on `device` (canonical), aligned for every
  /// dtype and for vector loads (host: 64 bytes). Throws std::bad_alloc or
  /// device_error.
  void* (*allocate)(const device_spec& device, std::size_t bytes) = nullptr;
  /// Frees a buffer from `allocate(bytes)`, given the same `bytes`.
  void (*free)(void* memory, std::size_t bytes) noexcept = nullptr;
  /// Sets `bytes` bytes at `memory`, a buffer of `device`, to zero.
  void (*zero)(const device_spec& device, void* memory, std::size_t bytes) = nullptr;
  /// The executor that runs `device`'s work in order (host: a thread per
  /// device, device_executor::of; CUDA: the same thread, which launches the
  /// work on the device's stream). Null: the kind has none.
  std::shared_ptr<detail::device_executor> (*executor)(const device_spec& device,
                                                       std::chrono::microseconds spin) = nullptr;
  /// Which memory `device` is in: one kernel may read and write every
  /// buffer of one domain (host: all are domain 0; CUDA: the physical
  /// GPU, shared by its logical GPUs). Null: one domain.
  int (*domain)(const device_spec& device) = nullptr;
  detail::kernel_table kernels;
};

} // namespace lockstep

namespace lockstep::detail {

/// The host kind: host memory, 64-byte aligned; today's kernels.
const device_kind& host_kind() noexcept;

/// The CUDA kind when lockstep has the CUDA backend and the process sees a
/// CUDA device (its copies registered on the first call), else null.
const device_kind* cuda_kind_if_present();

/// Makes `kind` (static storage) serve devices of `device_type` (upper
/// case, as device_spec holds it) from now on; tensors made before keep
/// their buffers. Throws value_error for "CPU" (always the host kind) and
/// for a type that another kind already serves.
void register_device_kind(std::string_view device_type, const device_kind& kind);

/// Undoes register_device_kind, so `device_type` is host memory again.
void unregister_device_kind(std::string_view device_type);

/// The kind that serves `device` (canonical or not): a registered kind for
/// its device type, else for GPU the CUDA kind where there is one, else the
/// host kind (CPU, GPU without a CUDA device or backend, other types).
const device_kind& kind_of(const device_spec& device);

/// Makes `copy` the copy from buffers of `from` to buffers of `to`. The
/// host-to-host copy is built in.
void register_copy(const device_kind& from, const device_kind& to, copy_function copy);

/// The copy from `from` to `to`. Throws device_error, naming both kinds,
/// when there is none.
copy_function copy_between(const device_kind& from, const device_kind& to);

/// A new buffer of `bytes` bytes of `kind`'s memory on `device`
/// (canonical), freed through the kind when its last handle goes.
device_buffer allocate_buffer(const device_kind& kind, const device_spec& device,
                              std::size_t bytes);

/// The executor of `device` from its kind (see device_kind::executor).
/// Throws device_error when the kind has none.
std::shared_ptr<device_executor> executor_of(const device_spec& device,
                                             std::chrono::microseconds spin);

/// `x` converted to `type` by its kind's convert kernel (float32 to and
/// from float16/bfloat16; `x` itself when it has that type): a new tensor
/// on x's device. Throws dtype_error for other pairs.
tensor converted(const tensor& x, lockstep::dtype type);

/// Checks that `inputs` and `outputs` have one dtype and shape and lie in
/// one memory domain of one kind, then runs the kind's reduce_buffers
/// (kernel_table). Throws value_error for no inputs, dtype_error,
/// shape_error or device_error naming what differs.
void reduce_buffers(reduce_op op, std::span<const tensor> inputs, std::span<tensor> outputs);

/// Throws device_error: `kind` has no kernel `kernel`.
[[noreturn]] void throw_missing_kernel(const device_kind& kind, std::string_view kernel);

/// The memory domain of `device` in its kind (device_kind::domain).
inline int memory_domain(const device_spec& device) {
  const auto& kind = kind_of(device);
  return kind.domain ? kind.domain(device) : 0;
}

/// The kind of `t`'s buffer.
inline const device_kind& kind_of(const tensor& t) {
  const auto* kind = t.buffer().kind();
  return kind ? *kind : host_kind();
}

/// Entry `entry` of the kernel table of `t`'s kind; throws device_error,
/// naming the kind and `kernel`, when the kind lacks it.
template <class Kernel>
Kernel kernel_of(const tensor& t, Kernel kernel_table::*entry, std::string_view kernel) {
  const auto& kind = kind_of(t);
  auto found = kind.kernels.*entry;
  if (found == nullptr)
    throw_missing_kernel(kind, kernel);
  return found;
}

} // namespace lockstep::detail

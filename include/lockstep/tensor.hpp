#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/device_buffer.hpp"
#include "lockstep/device_spec.hpp"
#include "lockstep/dtype.hpp"

// DLPack's managed tensor (dlpack/dlpack.h, Debian's libdlpack-dev), only
// declared: tensor::from_dlpack and to_dlpack take and give pointers to it,
// so a program that does not exchange tensors with another library needs
// no DLPack header, and one that does includes <dlpack/dlpack.h> itself.
// Kept in tensor.hpp rather than a header of its own because the functions
// are members of tensor (from_dlpack builds one around a foreign buffer).
struct DLManagedTensor;

namespace lockstep {

/// Dimensions of a tensor, outermost first; {} is a scalar.
using shape_t = std::vector<std::int64_t>;

/// "[2, 3]"; "[]" for a scalar.
std::string shape_to_string(const shape_t& shape);

/// A dense, row-major array of one dtype in a reference-counted buffer that
/// belongs to the canonical device it lives on: memory of that device's
/// kind (host memory, 64-byte aligned, for CPU devices; CUDA memory for GPU
/// devices where lockstep has the CUDA backend and a device, else host
/// memory too: docs/gpu.md). A tensor from `from_dlpack` wraps another
/// library's buffer, aligned to its element size (docs/interop.md). Host
/// element access (`data()`, `raw_data()`, `at()`, `as_double()`, `to_string()`, `==`)
/// throws device_error for a buffer the host cannot read; `to(device)`
/// copies it to a host device first.
/// Copying a tensor copies the handle: both copies share one buffer, and a
/// write through either is seen by both. `copy()` and `to()` copy the data.
class tensor {
public:
  // -- construction -----------------------------------------------------------

  /// An empty float32 tensor of shape {0} on `current_device()`.
  tensor();

  /// A tensor of `shape` filled with zeros. Throws shape_error for a
  /// negative dimension.
  static tensor zeros(lockstep::dtype type, shape_t shape,
                      const device_spec& device = current_device());

  /// A tensor of `shape` whose elements are indeterminate until written: for
  /// results that are overwritten whole, where zero-filling would be a
  /// wasted pass over memory. Throws shape_error as `zeros`.
  static tensor uninitialized(lockstep::dtype type, shape_t shape,
                              const device_spec& device = current_device());

  /// A tensor of `shape` with every element `static_cast`ed from `value`
  /// (integers truncate toward zero; `value` must fit the dtype).
  static tensor filled(lockstep::dtype type, shape_t shape, double value,
                       const device_spec& device = current_device());

  /// A tensor of `shape` holding a copy of `values` in row-major order.
  /// Throws shape_error unless the shape has exactly `values.size()` elements.
  template <class T>
  static tensor from(const std::vector<T>& values, shape_t shape,
                     const device_spec& device = current_device()) {
    return from_elements(dtype_of_v<T>, values.data(), values.size(), std::move(shape), device);
  }

  /// A 1-D tensor holding a copy of `values`, on `current_device()`.
  template <class T>
  static tensor from(const std::vector<T>& values) {
    return from(values, {static_cast<std::int64_t>(values.size())});
  }

  /// A 1-D tensor holding `values`, on `current_device()`.
  template <class T>
  static tensor from(std::initializer_list<T> values) {
    return from_elements(dtype_of_v<T>, values.begin(), values.size(),
                         {static_cast<std::int64_t>(values.size())}, current_device());
  }

  /// A rank-0 tensor holding `value`.
  template <class T>
  static tensor scalar(T value, const device_spec& device = current_device()) {
    return from_elements(dtype_of_v<T>, &value, 1, {}, device);
  }

  // -- DLPack (docs/interop.md) -----------------------------------------------

  /// A tensor over the memory of `managed` (DLPack 0.6), without a copy,
  /// which it owns from then on: the producer's deleter runs exactly once,
  /// when the last handle to the buffer goes (copies and `reshaped` views
  /// share it), on whichever thread drops it. Host memory (kDLCPU,
  /// kDLCUDAHost) is placed on `current_device()` when that is host
  /// memory, else on cpu_device(0); kDLCUDA memory (with the CUDA backend
  /// and a device) on `current_device()` when that is a GPU on the same
  /// physical device, else on that device's first logical GPU. CUDA memory
  /// must be ready (the producer's work on it finished) when it is passed.
  /// Strided, non-compact host memory, and memory not aligned to its
  /// element size, are copied into a new tensor, after which the deleter
  /// runs at once; non-compact CUDA memory is refused. Errors (after which
  /// the deleter has also run, so a call never leaks): value_error for a
  /// null `managed`, a null `shape` or `data` where elements are needed,
  /// a negative `ndim`, or non-compact CUDA memory; shape_error for a
  /// negative dimension; dtype_error naming a DLPack dtype lockstep lacks
  /// (lanes other than 1, unsigned, complex, other widths); device_error
  /// naming a device type it cannot read, or kDLCUDA without the backend,
  /// without a device, or with a device that does not exist.
  static tensor from_dlpack(DLManagedTensor* managed);

  /// As `from_dlpack(managed)`, on `device`, which must be of the memory's
  /// kind: a host-memory device for kDLCPU and kDLCUDAHost, a logical GPU
  /// of the physical device `managed` names for kDLCUDA (device_error
  /// otherwise, naming both).
  static tensor from_dlpack(DLManagedTensor* managed, const device_spec& device);

  /// This tensor as a DLPack 0.6 managed tensor, without a copy: compact
  /// (strides null), byte_offset 0, kDLCPU for host memory or kDLCUDA (the
  /// physical device) for CUDA memory, whose work so far has finished when
  /// this returns. The consumer must call its deleter exactly once; until
  /// then it holds a handle to the buffer, which keeps it alive. It is a
  /// read-only view (DLPack 0.6 cannot say so): the consumer must not write
  /// it, since every other handle shares the buffer; it sees writes made
  /// through lockstep handles to the same buffer (a variable gives a write
  /// a new buffer while a handle is out). Throws device_error for memory
  /// of another kind.
  DLManagedTensor* to_dlpack() const;

  /// As `to_dlpack()` over a new copy of the data (`copy()`), which no
  /// lockstep handle shares: the consumer may write it.
  DLManagedTensor* to_dlpack_copy() const;

  // -- properties -------------------------------------------------------------

  /// The element type.
  lockstep::dtype dtype() const { return dtype_; }

  /// The dimensions, outermost first.
  const shape_t& shape() const { return shape_; }

  /// The number of dimensions (0 for a scalar).
  std::size_t rank() const { return shape_.size(); }

  /// The product of the dimensions (1 for a scalar).
  std::int64_t num_elements() const { return num_elements_; }

  /// `num_elements() * size_of(dtype())`.
  std::size_t byte_size() const;

  /// The canonical device this tensor lives on.
  const device_spec& device() const { return device_; }

  // -- element access ---------------------------------------------------------

  /// The elements as `T`. Throws dtype_error, naming both dtypes, unless
  /// `T` is this tensor's element type.
  template <class T>
  std::span<T> data() {
    check_element_type(dtype_of_v<T>);
    return {static_cast<T*>(raw_data()), static_cast<std::size_t>(num_elements_)};
  }

  /// The elements as `T`, read-only; throws as the non-const overload.
  template <class T>
  std::span<const T> data() const {
    check_element_type(dtype_of_v<T>);
    return {static_cast<const T*>(raw_data()), static_cast<std::size_t>(num_elements_)};
  }

  /// The start of the buffer (`byte_size()` bytes). Throws device_error,
  /// naming the device, unless the host can read the buffer.
  void* raw_data() {
    check_host_accessible();
    return buffer_.data();
  }

  /// The start of the buffer, read-only; throws as the non-const overload.
  const void* raw_data() const {
    check_host_accessible();
    return buffer_.data();
  }

  /// The buffer: its address in the device's memory, its length and its
  /// memory kind. For device kernels and copies; the host reads elements
  /// through `data()`.
  const device_buffer& buffer() const noexcept { return buffer_; }

  /// Element `flat_index` in row-major order. Throws dtype_error as
  /// `data<T>()`, and value_error unless 0 <= flat_index < num_elements().
  template <class T>
  T at(std::int64_t flat_index) const {
    check_index(flat_index);
    return data<T>()[static_cast<std::size_t>(flat_index)];
  }

  /// Element `flat_index` of any dtype, converted to double; bounds-checked
  /// as `at()`.
  double as_double(std::int64_t flat_index) const;

  // -- copies and views -------------------------------------------------------

  /// A deep copy on the same device.
  tensor copy() const;

  /// A deep copy on `device` (canonicalised); always a new buffer, even if
  /// `device` is this tensor's device.
  tensor to(const device_spec& device) const;

  /// True when both handles share one buffer (identity, not equality).
  bool same_buffer(const tensor& other) const;

  /// How many handles share this buffer (this one included). A variable
  /// uses it to give a new buffer to a write while readers hold the old one.
  long buffer_use_count() const noexcept { return buffer_.use_count(); }

  /// A handle with `shape` that shares this buffer. Throws shape_error
  /// unless `shape` has as many elements as this tensor.
  tensor reshaped(shape_t shape) const;

  /// "tensor<float32>[2]{1, 2} @/job:localhost/replica:0/task:0/device:CPU:0";
  /// elements are listed flat, the middle ones elided beyond 8 elements.
  std::string to_string() const;

private:
  tensor(lockstep::dtype type, shape_t shape, const device_spec& device);

  /// A tensor over `buffer`, which holds at least `byte_size()` bytes.
  tensor(lockstep::dtype type, shape_t shape, const device_spec& device, device_buffer buffer);

  /// from_dlpack on `device`, or on its default device when null.
  static tensor from_dlpack_on(DLManagedTensor* managed, const device_spec* device);

  static tensor from_elements(lockstep::dtype type, const void* elements, std::size_t count,
                              shape_t shape, const device_spec& device);

  void check_element_type(lockstep::dtype requested) const;

  void check_index(std::int64_t flat_index) const;

  void check_host_accessible() const {
    if (!buffer_.host_accessible()) [[unlikely]]
      throw_not_host_accessible();
  }

  [[noreturn]] void throw_not_host_accessible() const;

  lockstep::dtype dtype_;
  shape_t shape_;
  std::int64_t num_elements_;
  device_spec device_; // before buffer_: the allocation needs the device
  device_buffer buffer_;
};

/// Same dtype, shape and element values (compared as the element type, so
/// NaN != NaN); the devices are not compared.
bool operator==(const tensor& lhs, const tensor& rhs);

/// Writes `t.to_string()`.
std::ostream& operator<<(std::ostream& out, const tensor& t);

// -- kernels ------------------------------------------------------------------
// In-place elementwise kernels, run by the kernel table of the buffers'
// device kind (the host kind's for host memory). Binary kernels check the
// dtypes first (dtype_error) and then the shapes (shape_error), naming both
// sides; then both buffers must be in one kind of memory (device_error
// otherwise; host memory labelled with different devices is one kind). A
// kind without the kernel throws device_error naming the kind and kernel.
// Integer results must fit the dtype, as in C++. float16 and bfloat16 are
// computed in float and rounded to nearest even once per element and call
// (a factor or divisor is cast to float, not to the 16-bit type).

/// `accumulator += x`, elementwise. `x` may share the accumulator's buffer.
void add_into(tensor& accumulator, const tensor& x);

/// `accumulator -= x`, elementwise. `x` may share the accumulator's buffer.
void subtract_into(tensor& accumulator, const tensor& x);

/// `accumulator *= x`, elementwise. `x` may share the accumulator's buffer.
void multiply_into(tensor& accumulator, const tensor& x);

/// `accumulator = x < accumulator ? x : accumulator`, elementwise: the
/// accumulator is kept unless `x` is strictly less, so a NaN accumulator
/// stays NaN, a NaN `x` is ignored, and of two equal values (+0 and -0) the
/// accumulator's is kept. `x` may share the accumulator's buffer.
void min_into(tensor& accumulator, const tensor& x);

/// `accumulator = accumulator < x ? x : accumulator`, elementwise, with
/// `min_into`'s rules for NaN and equal values.
void max_into(tensor& accumulator, const tensor& x);

/// `y += factor * x`, elementwise (BLAS's axpy). Floating dtypes multiply by
/// `factor` cast to the dtype; integer dtypes compute in double and
/// truncate toward zero.
void axpy_into(tensor& y, double factor, const tensor& x);

/// `x *= factor`, elementwise. Floating dtypes multiply by `factor` cast to
/// the dtype (as TF's `x * tf.cast(factor, x.dtype)`); integer dtypes
/// compute in double and truncate toward zero.
void scale_into(tensor& x, double factor);

/// `x /= divisor`, elementwise. Integer dtypes truncate toward zero (C++
/// `/`, so -7 / 2 == -3) and throw value_error for a zero divisor; floating
/// dtypes divide by `divisor` cast to the dtype.
void divide_into(tensor& x, std::int64_t divisor);

/// Copies the elements of `source` into `destination`'s buffer, between
/// kinds of memory through the registered copy (device_error if none).
void copy_into(tensor& destination, const tensor& source);

/// The sum of `x` over dimension `axis`: a new tensor on `x`'s device whose
/// shape is `x`'s without that dimension. Throws value_error unless
/// `axis < x.rank()`.
tensor reduce_sum_axis(const tensor& x, std::size_t axis);

} // namespace lockstep

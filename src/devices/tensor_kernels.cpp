// The public tensor kernels: they check dtypes, shapes and memory kinds,
// then run the kernel of the buffers' device kind from the registry (the
// host kind's are in host/host_kernels.cpp).

#include <string>

#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"

#include "devices/device_registry.hpp"

namespace lockstep {

namespace {

using detail::kernel_table;

void check_same_dtype_and_shape(std::string_view kernel, const tensor& lhs, const tensor& rhs) {
  if (lhs.dtype() != rhs.dtype())
    throw dtype_error(std::string(kernel) + ": dtype " + std::string(to_string(lhs.dtype()))
                      + " vs " + std::string(to_string(rhs.dtype())));
  if (lhs.shape() != rhs.shape())
    throw shape_error(std::string(kernel) + ": shape " + shape_to_string(lhs.shape()) + " vs "
                      + shape_to_string(rhs.shape()));
}

/// Both buffers must be in one kind of memory (host memory labelled with
/// different devices is one kind).
void check_same_kind(std::string_view kernel, const tensor& lhs, const tensor& rhs) {
  const auto& lhs_kind = detail::kind_of(lhs);
  const auto& rhs_kind = detail::kind_of(rhs);
  if (&lhs_kind != &rhs_kind)
    throw device_error(std::string(kernel) + ": operands in different memory: "
                       + std::string(lhs_kind.name) + " (" + lhs.device().to_string() + ") vs "
                       + std::string(rhs_kind.name) + " (" + rhs.device().to_string()
                       + "); copy one with to(device) first");
}

void run_binary(std::string_view kernel, kernel_table::binary_kernel kernel_table::*entry,
                tensor& accumulator, const tensor& x) {
  check_same_dtype_and_shape(kernel, accumulator, x);
  check_same_kind(kernel, accumulator, x);
  detail::kernel_of(accumulator, entry, kernel)(accumulator, x);
}

} // namespace

void add_into(tensor& accumulator, const tensor& x) {
  run_binary("add_into", &kernel_table::add, accumulator, x);
}

void subtract_into(tensor& accumulator, const tensor& x) {
  run_binary("subtract_into", &kernel_table::subtract, accumulator, x);
}

void multiply_into(tensor& accumulator, const tensor& x) {
  run_binary("multiply_into", &kernel_table::multiply, accumulator, x);
}

void min_into(tensor& accumulator, const tensor& x) {
  run_binary("min_into", &kernel_table::min, accumulator, x);
}

void max_into(tensor& accumulator, const tensor& x) {
  run_binary("max_into", &kernel_table::max, accumulator, x);
}

void axpy_into(tensor& y, double factor, const tensor& x) {
  check_same_dtype_and_shape("axpy_into", y, x);
  check_same_kind("axpy_into", y, x);
  detail::kernel_of(y, &kernel_table::axpy, "axpy_into")(y, factor, x);
}

void scale_into(tensor& x, double factor) {
  detail::kernel_of(x, &kernel_table::scale, "scale_into")(x, factor);
}

void divide_into(tensor& x, std::int64_t divisor) {
  if (divisor == 0 && is_integer(x.dtype()))
    throw value_error("divide_into: integer division by zero");
  detail::kernel_of(x, &kernel_table::divide, "divide_into")(x, divisor);
}

void copy_into(tensor& destination, const tensor& source) {
  check_same_dtype_and_shape("copy_into", destination, source);
  const auto& from = detail::kind_of(source);
  const auto& to = detail::kind_of(destination);
  if (&from != &to) {
    detail::copy_between(from, to)(destination.device(), destination.buffer().data(),
                                   source.device(), source.buffer().data(), source.byte_size());
    return;
  }
  detail::kernel_of(destination, &kernel_table::copy, "copy_into")(destination, source);
}

tensor reduce_sum_axis(const tensor& x, std::size_t axis) {
  if (axis >= x.rank())
    throw value_error("reduce_sum_axis: axis " + std::to_string(axis)
                      + " is out of range for shape " + shape_to_string(x.shape()));
  return detail::kernel_of(x, &kernel_table::reduce_sum_axis, "reduce_sum_axis")(x, axis);
}

namespace detail {

tensor converted(const tensor& x, lockstep::dtype type) {
  if (x.dtype() == type)
    return x;
  const bool widening = is_half(x.dtype()) && type == dtype::f32;
  const bool narrowing = x.dtype() == dtype::f32 && is_half(type);
  if (!widening && !narrowing)
    throw dtype_error("converted: from " + std::string(to_string(x.dtype())) + " to " + std::string(to_string(type))
                      + "; only float32 to and from float16 and bfloat16");
  auto result = tensor::uninitialized(type, x.shape(), x.device());
  kernel_of(x, &kernel_table::convert, "converted")(result, x);
  return result;
}

void reduce_buffers(reduce_op op, std::span<const tensor> inputs, std::span<tensor> outputs) {
  if (inputs.empty())
    throw value_error("reduce_buffers: no inputs");
  const auto& first = inputs.front();
  const auto& kind = kind_of(first);
  const auto domain = memory_domain(first.device());
  const auto check = [&](const tensor& t) {
    check_same_dtype_and_shape("reduce_buffers", first, t);
    check_same_kind("reduce_buffers", first, t);
    if (memory_domain(t.device()) != domain)
      throw device_error("reduce_buffers: " + first.device().to_string() + " and "
                         + t.device().to_string() + " are not in one memory of the "
                         + std::string(kind.name) + " kind");
  };
  for (const auto& t : inputs)
    check(t);
  for (const auto& t : outputs)
    check(t);
  kernel_of(first, &kernel_table::reduce_buffers, "reduce_buffers")(op, inputs, outputs);
}

} // namespace detail

} // namespace lockstep

// Elementwise kernels over host buffers. Each is one template over the
// element type, dispatched once per call through visit_dtype; the loops run
// in blocks (elementwise_loops.hpp explains why).

#include <cstring>
#include <functional>
#include <numeric>
#include <type_traits>

#include "lockstep/error.hpp"
#include "lockstep/tensor.hpp"

#include "devices/elementwise_loops.hpp"

namespace lockstep {

namespace {

using detail::combine_loop;
using detail::divide_loop;
using detail::in_blocks;

void check_same_dtype_and_shape(std::string_view kernel, const tensor& lhs, const tensor& rhs) {
  if (lhs.dtype() != rhs.dtype())
    throw dtype_error(std::string(kernel) + ": dtype " + std::string(to_string(lhs.dtype()))
                      + " vs " + std::string(to_string(rhs.dtype())));
  if (lhs.shape() != rhs.shape())
    throw shape_error(std::string(kernel) + ": shape " + shape_to_string(lhs.shape()) + " vs "
                      + shape_to_string(rhs.shape()));
}

template <class T>
void subtract_loop(T* __restrict accumulator, const T* __restrict x, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    accumulator[i] -= x[i];
}

/// Runs `loop(results, operands, length)` over the elements in blocks, after
/// the dtype and shape checks. `x` may share the accumulator's buffer: the
/// loops assume distinct buffers, so it is then read from a copy.
template <class Loop>
void binary_in_blocks(std::string_view kernel, tensor& accumulator, const tensor& x, Loop loop) {
  check_same_dtype_and_shape(kernel, accumulator, x);
  const tensor source = accumulator.same_buffer(x) ? x.copy() : x;
  visit_dtype(x.dtype(), [&]<class T>(T) {
    auto* results = accumulator.data<T>().data();
    const auto* operands = source.data<T>().data();
    in_blocks(x.num_elements(), [=](std::int64_t offset, std::int64_t length) {
      loop(results + offset, operands + offset, length);
    });
  });
}

/// accumulator = accumulator op x, with the collectives' combine_loop.
template <reduce_op Op>
void combine_kernel(std::string_view kernel, tensor& accumulator, const tensor& x) {
  binary_in_blocks(kernel, accumulator, x,
                   [](auto* results, const auto* operands, std::int64_t length) {
                     combine_loop<Op>(results, operands, length);
                   });
}

template <class T>
void axpy_loop(T* __restrict y, double factor, const T* __restrict x, std::int64_t count) {
  if constexpr (std::is_floating_point_v<T>) {
    const auto a = static_cast<T>(factor);
    for (std::int64_t i = 0; i < count; ++i)
      y[i] += a * x[i];
  } else {
    for (std::int64_t i = 0; i < count; ++i)
      y[i] = static_cast<T>(static_cast<double>(y[i]) + factor * static_cast<double>(x[i]));
  }
}

template <class T>
void scale_loop(T* __restrict x, double factor, std::int64_t count) {
  if constexpr (std::is_floating_point_v<T>) {
    const auto cast_factor = static_cast<T>(factor);
    for (std::int64_t i = 0; i < count; ++i)
      x[i] *= cast_factor;
  } else {
    for (std::int64_t i = 0; i < count; ++i)
      x[i] = static_cast<T>(static_cast<double>(x[i]) * factor);
  }
}

std::int64_t product(shape_t::const_iterator first, shape_t::const_iterator last) {
  return std::accumulate(first, last, std::int64_t{1}, std::multiplies<>{});
}

} // namespace

void add_into(tensor& accumulator, const tensor& x) {
  combine_kernel<reduce_op::sum>("add_into", accumulator, x);
}

void subtract_into(tensor& accumulator, const tensor& x) {
  binary_in_blocks("subtract_into", accumulator, x,
                   [](auto* results, const auto* operands, std::int64_t length) {
                     subtract_loop(results, operands, length);
                   });
}

void multiply_into(tensor& accumulator, const tensor& x) {
  combine_kernel<reduce_op::prod>("multiply_into", accumulator, x);
}

void min_into(tensor& accumulator, const tensor& x) {
  combine_kernel<reduce_op::min>("min_into", accumulator, x);
}

void max_into(tensor& accumulator, const tensor& x) {
  combine_kernel<reduce_op::max>("max_into", accumulator, x);
}

void axpy_into(tensor& y, double factor, const tensor& x) {
  check_same_dtype_and_shape("axpy_into", y, x);
  const tensor source = y.same_buffer(x) ? x.copy() : x;
  visit_dtype(x.dtype(), [&]<class T>(T) {
    auto* results = y.data<T>().data();
    const auto* addends = source.data<T>().data();
    in_blocks(x.num_elements(), [=](std::int64_t offset, std::int64_t length) {
      axpy_loop(results + offset, factor, addends + offset, length);
    });
  });
}

void scale_into(tensor& x, double factor) {
  visit_dtype(x.dtype(), [&]<class T>(T) {
    auto* elements = x.data<T>().data();
    in_blocks(x.num_elements(), [=](std::int64_t offset, std::int64_t length) {
      scale_loop(elements + offset, factor, length);
    });
  });
}

void divide_into(tensor& x, std::int64_t divisor) {
  if (divisor == 0 && is_integer(x.dtype()))
    throw value_error("divide_into: integer division by zero");
  visit_dtype(x.dtype(), [&]<class T>(T) {
    auto* elements = x.data<T>().data();
    in_blocks(x.num_elements(), [=](std::int64_t offset, std::int64_t length) {
      divide_loop(elements + offset, divisor, length);
    });
  });
}

void copy_into(tensor& destination, const tensor& source) {
  check_same_dtype_and_shape("copy_into", destination, source);
  if (!destination.same_buffer(source))
    std::memcpy(destination.raw_data(), source.raw_data(), source.byte_size());
}

tensor reduce_sum_axis(const tensor& x, std::size_t axis) {
  const auto& shape = x.shape();
  if (axis >= shape.size())
    throw value_error("reduce_sum_axis: axis " + std::to_string(axis)
                      + " is out of range for shape " + shape_to_string(shape));
  const auto axis_at = shape.begin() + static_cast<std::ptrdiff_t>(axis);
  shape_t result_shape = shape;
  result_shape.erase(result_shape.begin() + static_cast<std::ptrdiff_t>(axis));
  auto result = tensor::zeros(x.dtype(), std::move(result_shape), x.device());
  // x viewed as [outer, extent, inner]; each of its rows of `inner`
  // contiguous elements is added into row `o` of result, viewed as [outer, inner].
  const auto outer = product(shape.begin(), axis_at);
  const auto extent = *axis_at;
  const auto inner = product(axis_at + 1, shape.end());
  visit_dtype(x.dtype(), [&]<class T>(T) {
    const auto* input = x.data<T>().data();
    auto* sums = result.data<T>().data();
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t k = 0; k < extent; ++k)
        in_blocks(inner, [=](std::int64_t offset, std::int64_t length) {
          combine_loop<reduce_op::sum>(sums + o * inner + offset, input + (o * extent + k) * inner + offset, length);
        });
  });
  return result;
}

} // namespace lockstep

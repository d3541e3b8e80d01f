// The host kind's elementwise kernels. Each is one template over the
// element type, dispatched once per call through visit_dtype; the loops run
// in blocks (elementwise_loops.hpp explains why, and how float16 and
// bfloat16 are computed in float and rounded once).

#include "devices/host/host_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <type_traits>
#include <vector>

#include "devices/elementwise_loops.hpp"

namespace lockstep::detail::host {

namespace {

template <class T>
void subtract_loop(T* __restrict accumulator, const T* __restrict x, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    accumulator[i] -= x[i];
}

/// Runs `loop(results, operands, length)` over the elements in blocks. `x`
/// may share the accumulator's buffer: the loops assume distinct buffers,
/// so it is then read from a copy. Half types run `loop` on float copies of
/// each block and round the results back.
template <class Loop>
void binary_in_blocks(tensor& accumulator, const tensor& x, Loop loop) {
  const tensor source = accumulator.same_buffer(x) ? x.copy() : x;
  visit_dtype(x.dtype(), [&]<class T>(T) {
    auto* results = accumulator.data<T>().data();
    const auto* operands = source.data<T>().data();
    if constexpr (is_half_v<T>) {
      alignas(64) float widened[block];
      std::int64_t done = 0;
      in_float_blocks(results, x.num_elements(), [&](float* values, std::int64_t length) {
        widen(operands + done, widened, length);
        loop(values, widened, length);
        done += length;
      });
    } else {
      in_blocks(x.num_elements(), [=](std::int64_t offset, std::int64_t length) {
        loop(results + offset, operands + offset, length);
      });
    }
  });
}

/// accumulator = accumulator op x, with the collectives' combine_loop.
template <reduce_op Op>
void combine_kernel(tensor& accumulator, const tensor& x) {
  binary_in_blocks(accumulator, x, [](auto* results, const auto* operands, std::int64_t length) {
    combine_loop<Op>(results, operands, length);
  });
}

template <class T>
void axpy_loop(T* __restrict y, T a, const T* __restrict x, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    y[i] += a * x[i];
}

template <class T>
void axpy_integer_loop(T* __restrict y, double factor, const T* __restrict x,
                       std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    y[i] = static_cast<T>(static_cast<double>(y[i]) + factor * static_cast<double>(x[i]));
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

void add(tensor& accumulator, const tensor& x) {
  combine_kernel<reduce_op::sum>(accumulator, x);
}

void subtract(tensor& accumulator, const tensor& x) {
  binary_in_blocks(accumulator, x, [](auto* results, const auto* operands, std::int64_t length) {
    subtract_loop(results, operands, length);
  });
}

void multiply(tensor& accumulator, const tensor& x) {
  combine_kernel<reduce_op::prod>(accumulator, x);
}

void min(tensor& accumulator, const tensor& x) {
  combine_kernel<reduce_op::min>(accumulator, x);
}

void max(tensor& accumulator, const tensor& x) {
  combine_kernel<reduce_op::max>(accumulator, x);
}

void axpy(tensor& y, double factor, const tensor& x) {
  // Half types: factor cast to float, y + factor * x in float, one rounding.
  binary_in_blocks(y, x, [=](auto* results, const auto* operands, std::int64_t length) {
    using value = std::remove_cvref_t<decltype(*results)>;
    if constexpr (std::is_floating_point_v<value>) {
      axpy_loop(results, static_cast<value>(factor), operands, length);
    } else {
      axpy_integer_loop(results, factor, operands, length);
    }
  });
}

void scale(tensor& x, double factor) {
  // Half types: factor cast to float, one rounding per element.
  visit_dtype(x.dtype(), [&]<class T>(T) {
    auto* elements = x.data<T>().data();
    if constexpr (is_half_v<T>) {
      in_float_blocks(elements, x.num_elements(), [=](float* values, std::int64_t length) {
        scale_loop(values, factor, length);
      });
    } else {
      in_blocks(x.num_elements(), [=](std::int64_t offset, std::int64_t length) {
        scale_loop(elements + offset, factor, length);
      });
    }
  });
}

void divide(tensor& x, std::int64_t divisor) {
  visit_dtype(x.dtype(), [&]<class T>(T) {
    auto* elements = x.data<T>().data();
    in_blocks(x.num_elements(), [=](std::int64_t offset, std::int64_t length) {
      divide_loop(elements + offset, divisor, length);
    });
  });
}

void copy(tensor& destination, const tensor& source) {
  if (!destination.same_buffer(source) && source.byte_size() != 0)
    std::memcpy(destination.raw_data(), source.raw_data(), source.byte_size());
}

tensor reduce_sum_axis(const tensor& x, std::size_t axis) {
  const auto& shape = x.shape();
  const auto axis_at = shape.begin() + static_cast<std::ptrdiff_t>(axis);
  shape_t result_shape = shape;
  result_shape.erase(result_shape.begin() + static_cast<std::ptrdiff_t>(axis));
  auto result = tensor::zeros(x.dtype(), std::move(result_shape), x.device());
  // x viewed as [outer, extent, inner]; each of its rows of `inner`
  // contiguous elements is added into row `o` of result, viewed as [outer, inner].
  const auto outer = product(shape.begin(), axis_at);
  const auto extent = *axis_at;
  const auto inner = product(axis_at + 1, shape.end());
  const auto add_row = [=]<class T>(T* sums, const T* row) {
    in_blocks(inner, [=](std::int64_t offset, std::int64_t length) {
      combine_loop<reduce_op::sum>(sums + offset, row + offset, length);
    });
  };
  visit_dtype(x.dtype(), [&]<class T>(T) {
    const auto* input = x.data<T>().data();
    auto* sums = result.data<T>().data();
    if constexpr (is_half_v<T>) {
      // Summed in float, one row of the input widened at a time, and
      // rounded once at the end.
      const auto count = static_cast<std::size_t>(result.num_elements());
      std::vector<float> float_sums(count);
      std::vector<float> row(static_cast<std::size_t>(inner));
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t k = 0; k < extent; ++k) {
          widen(input + (o * extent + k) * inner, row.data(), inner);
          add_row(float_sums.data() + o * inner, row.data());
        }
      narrow(float_sums.data(), sums, static_cast<std::int64_t>(count));
    } else {
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t k = 0; k < extent; ++k)
          add_row(sums + o * inner, input + (o * extent + k) * inner);
    }
  });
  return result;
}

void convert(tensor& destination, const tensor& source) {
  visit_dtype(source.dtype(), [&]<class From>(From) {
    visit_dtype(destination.dtype(), [&]<class To>(To) {
      const auto* in = source.data<From>().data();
      auto* out = destination.data<To>().data();
      const auto count = source.num_elements();
      if constexpr (is_half_v<From> && std::is_same_v<To, float>)
        widen(in, out, count);
      else if constexpr (std::is_same_v<From, float> && is_half_v<To>)
        narrow(in, out, count);
      else if constexpr (std::is_same_v<From, To>)
        std::copy_n(in, count, out);
      else
        throw dtype_error("convert: from " + std::string(to_string(source.dtype())) + " to "
                          + std::string(to_string(destination.dtype()))
                          + "; only float32 to and from float16 and bfloat16");
    });
  });
}

void reduce_buffers(reduce_op op, std::span<const tensor> inputs, std::span<tensor> outputs) {
  const auto count = inputs.front().num_elements();
  const auto n = inputs.size();
  visit_dtype(inputs.front().dtype(), [&]<class T>(T) {
    dispatch_op(op, [&]<reduce_op Op>(std::integral_constant<reduce_op, Op>) {
      // Block by block into `result`, then out to every output, so an
      // output that is also an input is read before it is written.
      alignas(64) T result[block];
      in_blocks(count, [&](std::int64_t offset, std::int64_t length) {
        if constexpr (is_half_v<T>) {
          alignas(64) float wide[block];
          reduce_in_float<Op>(
            n, [&](std::size_t r) { return inputs[r].data<T>().data() + offset; }, length, wide,
            result);
        } else {
          std::copy_n(inputs[0].data<T>().data() + offset, length, result);
          for (std::size_t r = 1; r < n; ++r)
            combine_loop<Op>(result, inputs[r].data<T>().data() + offset, length);
          if constexpr (Op == reduce_op::mean)
            divide_loop(result, static_cast<std::int64_t>(n), length);
        }
        for (auto& output : outputs)
          std::copy_n(result, length, output.data<T>().data() + offset);
      });
    });
  });
}

} // namespace lockstep::detail::host

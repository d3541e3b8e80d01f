#pragma once

// The tensor kernel behind each reduce_op, for the cross_device_ops that
// reduce on the calling thread (reduction_to_one_device, hierarchical_copy).
// A reduction of N components is: `start_reduction` with the first (a
// copy), `combine_into` with each of the others in a fixed order, then
// `finish_reduction`. float16 and bfloat16 components are combined into a
// float32 accumulator and rounded once at the end, as allreduce_slices does,
// so both give the same bits.

#include "lockstep/error.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

#include "devices/device_registry.hpp"
#include "devices/elementwise_loops.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace lockstep::detail {

/// The accumulator of a reduction whose first component is `first`: a copy
/// on `device`; for float16 and bfloat16 a float32 copy (exact).
inline tensor start_reduction(const tensor& first, const device_spec& device) {
  if (!is_half(first.dtype()))
    return first.to(device);
  auto wide = converted(first, dtype::f32); // the kind's convert kernel
  return wide.device() == device.canonical() ? wide : wide.to(device);
}

/// `accumulator = accumulator op x`, elementwise: add_into for SUM and MEAN
/// (MEAN divides once, in `finish_reduction`), multiply_into for PROD,
/// min_into and max_into for MIN and MAX. Throws as those kernels do.
inline void combine_into(reduce_op op, tensor& accumulator, const tensor& x) {
  if (&kind_of(accumulator) != &kind_of(x)) { // e.g. GPU replicas reduced to /cpu:0
    combine_into(op, accumulator, x.to(accumulator.device()));
    return;
  }
  if (accumulator.dtype() == dtype::f32 && is_half(x.dtype())
      && !(accumulator.buffer().host_accessible() && x.buffer().host_accessible())) {
    // Device memory: widened by the kind's convert kernel (exact), then
    // combined in float32, which is what combine_widened computes.
    combine_into(op, accumulator, converted(x, dtype::f32));
    return;
  }
  if (accumulator.dtype() == dtype::f32 && is_half(x.dtype())) { // start_reduction's
    if (accumulator.shape() != x.shape())
      throw shape_error("combine_into: shape " + shape_to_string(accumulator.shape()) + " vs "
                        + shape_to_string(x.shape()));
    auto* sums = accumulator.data<float>().data();
    visit_dtype(x.dtype(), [&]<class T>(T) {
      if constexpr (is_half_v<T>) {
        const auto* operands = x.data<T>().data();
        const auto count = x.num_elements();
        switch (op) {
          case reduce_op::sum:
          case reduce_op::mean:
            return combine_widened<reduce_op::sum>(sums, operands, count);
          case reduce_op::prod:
            return combine_widened<reduce_op::prod>(sums, operands, count);
          case reduce_op::min:
            return combine_widened<reduce_op::min>(sums, operands, count);
          case reduce_op::max:
            return combine_widened<reduce_op::max>(sums, operands, count);
        }
        throw value_error("combine_into: invalid reduce_op");
      }
    });
    return;
  }
  switch (op) {
    case reduce_op::sum:
    case reduce_op::mean:
      return add_into(accumulator, x);
    case reduce_op::prod:
      return multiply_into(accumulator, x);
    case reduce_op::min:
      return min_into(accumulator, x);
    case reduce_op::max:
      return max_into(accumulator, x);
  }
  throw value_error("combine_into: invalid reduce_op");
}

/// Turns the combination of `count` components of dtype `type` into the
/// result: MEAN divides by `count` (integers truncate toward zero, as
/// divide_into); the other ops are already done. A float32 accumulator of
/// half components is then rounded to `type` once, into a new buffer on
/// its device.
inline void finish_reduction(reduce_op op, tensor& total, std::size_t count,
                             lockstep::dtype type) {
  if (op == reduce_op::mean)
    divide_into(total, static_cast<std::int64_t>(count));
  if (total.dtype() != type)
    total = converted(total, type);
}

} // namespace lockstep::detail

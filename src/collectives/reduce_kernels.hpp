#pragma once

// The tensor kernel behind each reduce_op, for the cross_device_ops that
// reduce on the calling thread (reduction_to_one_device, hierarchical_copy).
// A reduction of N components is: a copy of the first, `combine_into` with
// each of the others in a fixed order, then `finish_reduction`.

#include "lockstep/error.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

#include <cstddef>
#include <cstdint>

namespace lockstep::detail {

/// `accumulator = accumulator op x`, elementwise: add_into for SUM and MEAN
/// (MEAN divides once, in `finish_reduction`), multiply_into for PROD,
/// min_into and max_into for MIN and MAX. Throws as those kernels do.
inline void combine_into(reduce_op op, tensor& accumulator, const tensor& x) {
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

/// Turns the combination of `count` components into the result: MEAN
/// divides by `count` (integers truncate toward zero, as divide_into); the
/// other ops are already done.
inline void finish_reduction(reduce_op op, tensor& total, std::size_t count) {
  if (op == reduce_op::mean)
    divide_into(total, static_cast<std::int64_t>(count));
}

} // namespace lockstep::detail

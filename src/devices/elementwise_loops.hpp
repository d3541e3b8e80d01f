#pragma once

// Loops shared by the tensor kernels and the collectives. They run over
// __restrict pointers in blocks of `block` elements: at -O2, GCC 12
// vectorises a loop only when its trip count is a known multiple of the
// vector width, which a block's constant length is once inlined (measured:
// 3x the float32 add_into throughput of one long loop on in-cache data).

#include <cstdint>
#include <type_traits>

#include "lockstep/error.hpp"
#include "lockstep/reduce_op.hpp"

namespace lockstep::detail {

inline constexpr std::int64_t block = 64;

/// Calls `loop(offset, length)` for consecutive ranges covering [0, count):
/// full blocks, then the remainder.
template <class Loop>
void in_blocks(std::int64_t count, Loop loop) {
  std::int64_t offset = 0;
  for (; offset + block <= count; offset += block)
    loop(offset, block);
  loop(offset, count - offset);
}

/// `accumulator[i] = accumulator[i] op x[i]` for i < count: + for SUM and
/// MEAN (MEAN divides once, at the end), * for PROD. MIN and MAX keep the
/// accumulator unless `x` compares strictly less (greater), so NaN and
/// signed zeros come out the same in every kernel and collective.
template <reduce_op Op, class T>
void combine_loop(T* __restrict accumulator, const T* __restrict x, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) {
    if constexpr (Op == reduce_op::sum || Op == reduce_op::mean)
      accumulator[i] += x[i];
    else if constexpr (Op == reduce_op::min)
      accumulator[i] = x[i] < accumulator[i] ? x[i] : accumulator[i];
    else if constexpr (Op == reduce_op::max)
      accumulator[i] = accumulator[i] < x[i] ? x[i] : accumulator[i];
    else
      accumulator[i] *= x[i];
  }
}

/// `x[i] /= divisor` for i < count. Integers truncate toward zero (C++
/// division in std::int64_t, so a divisor beyond T's range gives 0, not
/// garbage); floating types divide by `divisor` cast to T.
template <class T>
void divide_loop(T* __restrict x, std::int64_t divisor, std::int64_t count) {
  if constexpr (std::is_floating_point_v<T>) {
    const auto cast_divisor = static_cast<T>(divisor);
    for (std::int64_t i = 0; i < count; ++i)
      x[i] /= cast_divisor;
  } else {
    for (std::int64_t i = 0; i < count; ++i)
      x[i] = static_cast<T>(x[i] / divisor);
  }
}

/// Calls `work(std::integral_constant<reduce_op, op>{})`, so a loop is
/// instantiated once per reduce_op and dispatched once per call.
template <class Work>
void dispatch_op(reduce_op op, Work work) {
  switch (op) {
    case reduce_op::sum:
      return work(std::integral_constant<reduce_op, reduce_op::sum>{});
    case reduce_op::mean:
      return work(std::integral_constant<reduce_op, reduce_op::mean>{});
    case reduce_op::min:
      return work(std::integral_constant<reduce_op, reduce_op::min>{});
    case reduce_op::max:
      return work(std::integral_constant<reduce_op, reduce_op::max>{});
    case reduce_op::prod:
      return work(std::integral_constant<reduce_op, reduce_op::prod>{});
  }
  throw value_error("invalid reduce_op");
}

} // namespace lockstep::detail

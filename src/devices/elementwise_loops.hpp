#pragma once

// Loops shared by the tensor kernels and the collectives. They run over
// __restrict pointers in blocks of `block` elements: at -O2, GCC 12
// vectorises a loop only when its trip count is a known multiple of the
// vector width, which a block's constant length is once inlined (measured:
// 3x the float32 add_into throughput of one long loop on in-cache data).
//
// float16 and bfloat16 are computed in float: a block of each operand is
// widened into float arrays, the float loop runs, and the result is rounded
// back once (to nearest, ties to even). So a kernel on half buffers rounds
// once per element and operation, as TF's CPU kernels do.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "lockstep/dtype.hpp"
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

/// `out[i] = float(in[i])` for i < count.
template <class T>
  requires is_half_v<T>
void widen(const T* __restrict in, float* __restrict out, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    out[i] = static_cast<float>(in[i]);
}

/// `out[i] = T(in[i])`, rounded to nearest even, for i < count.
template <class T>
  requires is_half_v<T>
void narrow(const float* __restrict in, T* __restrict out, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    out[i] = T(in[i]);
}

/// Calls `loop(values, length)` on float copies of consecutive blocks of
/// `x`, and rounds each block back into `x`.
template <class T, class Loop>
  requires is_half_v<T>
void in_float_blocks(T* x, std::int64_t count, Loop loop) {
  alignas(64) float values[block];
  in_blocks(count, [&](std::int64_t offset, std::int64_t length) {
    widen(x + offset, values, length);
    loop(values, length);
    narrow(values, x + offset, length);
  });
}

/// `accumulator op x`: + for SUM and MEAN (MEAN divides once, at the end),
/// * for PROD. MIN and MAX keep the accumulator unless `x` compares
/// strictly less (greater), so NaN and signed zeros come out the same in
/// every kernel and collective.
template <reduce_op Op, class T>
constexpr T combined(T accumulator, T x) {
  if constexpr (Op == reduce_op::sum || Op == reduce_op::mean)
    return accumulator + x;
  else if constexpr (Op == reduce_op::min)
    return x < accumulator ? x : accumulator;
  else if constexpr (Op == reduce_op::max)
    return accumulator < x ? x : accumulator;
  else
    return accumulator * x;
}

/// `accumulator[i] = combined(accumulator[i], x[i])` for i < count.
template <reduce_op Op, class T>
void combine_loop(T* __restrict accumulator, const T* __restrict x, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    accumulator[i] = combined<Op>(accumulator[i], x[i]);
}

/// `out[i] = combined(a[i], b[i])` for i < count: combine_loop with `a` as
/// the accumulator, written to `out` (one pass instead of a copy and a
/// combine).
template <reduce_op Op, class T>
void combine_into(T* __restrict out, const T* __restrict a, const T* __restrict b,
                  std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    out[i] = combined<Op>(a[i], b[i]);
}

/// combine_loop of half types: computed in float, rounded once per element.
template <reduce_op Op, class T>
  requires is_half_v<T>
void combine_loop(T* accumulator, const T* x, std::int64_t count) {
  alignas(64) float operands[block];
  std::int64_t done = 0;
  in_float_blocks(accumulator, count, [&](float* values, std::int64_t length) {
    widen(x + done, operands, length);
    combine_loop<Op>(values, operands, length);
    done += length;
  });
}

/// `accumulator[i] = accumulator[i] op float(x[i])` for i < count: a float
/// accumulator combined with half operands, with no rounding.
template <reduce_op Op, class T>
  requires is_half_v<T>
void combine_widened(float* accumulator, const T* x, std::int64_t count) {
  alignas(64) float operands[block];
  in_blocks(count, [&](std::int64_t offset, std::int64_t length) {
    widen(x + offset, operands, length);
    combine_loop<Op>(accumulator + offset, operands, length);
  });
}

/// `x[i] /= divisor` for i < count. Integers truncate toward zero (C++
/// division in std::int64_t, so a divisor beyond T's range gives 0, not
/// garbage); floating types divide by `divisor` cast to T; half types
/// divide in float by `divisor` cast to float.
template <class T>
void divide_loop(T* __restrict x, std::int64_t divisor, std::int64_t count) {
  if constexpr (is_half_v<T>) {
    in_float_blocks(x, count, [=](float* values, std::int64_t length) {
      divide_loop(values, divisor, length);
    });
  } else if constexpr (std::is_floating_point_v<T>) {
    const auto cast_divisor = static_cast<T>(divisor);
    for (std::int64_t i = 0; i < count; ++i)
      x[i] /= cast_divisor;
  } else {
    for (std::int64_t i = 0; i < count; ++i)
      x[i] = static_cast<T>(x[i] / divisor);
  }
}

/// The reduction of `n` half-type operands (`operand(r)` points at rank r's
/// `count` elements) combined in rank order in float through `wide` (room
/// for `count` floats), MEAN's division included, rounded once into `out`:
/// what every collective does for float16 and bfloat16.
template <reduce_op Op, class T, class Operand>
  requires is_half_v<T>
void reduce_in_float(std::size_t n, Operand operand, std::int64_t count, float* wide, T* out) {
  widen(operand(0), wide, count);
  for (std::size_t r = 1; r < n; ++r)
    combine_widened<Op>(wide, operand(r), count);
  if constexpr (Op == reduce_op::mean)
    divide_loop(wide, static_cast<std::int64_t>(n), count);
  narrow(wide, out, count);
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

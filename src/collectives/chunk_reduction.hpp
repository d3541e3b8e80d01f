#pragma once

// The data work of a reduction whose operands every rank can read (threads
// of one process: allreduce_slices; processes of one host over shared
// memory: host_shm_communicator): n operands combined in rank order 0, 1,
// ..., n-1, then MEAN's one division, so every caller gets the same bits
// whichever rank does the work. float16 and bfloat16 combine in float and
// round once. The inner loops run over __restrict pointers in blocks of a
// constant length, which is what lets GCC vectorise them
// (elementwise_loops.hpp).

#include "devices/elementwise_loops.hpp"
#include "lockstep/reduce_op.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lockstep::detail {

template <reduce_op Op, class T>
void combine_in_blocks(T* accumulator, const T* x, std::size_t count) {
  in_blocks(static_cast<std::int64_t>(count), [=](std::int64_t offset, std::int64_t length) {
    combine_loop<Op>(accumulator + offset, x + offset, length);
  });
}

/// Scratch bytes per element of a chunk: the accumulator; for half types a
/// float accumulator and the rounded block.
template <class T>
constexpr std::size_t scratch_per_element = is_half_v<T> ? sizeof(float) + sizeof(T) : sizeof(T);

/// The chunks of one segment for non-half types: each chunk of
/// `input(0)` combined with `input(1)`, ..., `input(n - 1)` in that order
/// in `accumulator`, MEAN divided, and copied to every `output(r)`.
template <reduce_op Op, class T, class Input, class Output>
void reduce_chunks(std::size_t n, Input input, Output output, std::size_t count,
                   std::size_t chunk, T* accumulator) {
  for (std::size_t done = 0; done < count; done += chunk) {
    const auto length = std::min(chunk, count - done);
    if (n == 1) {
      std::memcpy(accumulator, input(0) + done, length * sizeof(T));
    } else {
      const auto* first = input(0) + done;
      const auto* second = input(1) + done;
      in_blocks(static_cast<std::int64_t>(length), [=](std::int64_t at, std::int64_t size) {
        combine_into<Op>(accumulator + at, first + at, second + at, size);
      });
    }
    for (std::size_t r = 2; r < n; ++r)
      combine_in_blocks<Op>(accumulator, input(r) + done, length);
    if constexpr (Op == reduce_op::mean)
      in_blocks(static_cast<std::int64_t>(length), [=](std::int64_t at, std::int64_t size) {
        divide_loop(accumulator + at, static_cast<std::int64_t>(n), size);
      });
    for (std::size_t r = 0; r < n; ++r)
      std::memcpy(output(r) + done, accumulator, length * sizeof(T));
  }
}

/// Reduces `count` elements of the n operands `input(r)` (pointers to T)
/// into every `output(r)`, chunk by chunk through `block`
/// (chunk * scratch_per_element<T> bytes): a chunk is read from every
/// input before it is written to any output, so outputs may alias inputs.
template <reduce_op Op, class T, class Input, class Output>
void reduce_to_every_output(std::size_t n, Input input, Output output, std::size_t count,
                            std::size_t chunk, std::byte* block) {
  if constexpr (is_half_v<T>) {
    auto* wide = reinterpret_cast<float*>(block);
    auto* rounded = reinterpret_cast<T*>(wide + chunk);
    for (std::size_t done = 0; done < count; done += chunk) {
      const auto length = std::min(chunk, count - done);
      const auto size = static_cast<std::int64_t>(length);
      reduce_in_float<Op>(n, [&](std::size_t r) { return input(r) + done; }, size, wide,
                          rounded);
      for (std::size_t r = 0; r < n; ++r)
        std::memcpy(output(r) + done, rounded, length * sizeof(T));
    }
  } else {
    reduce_chunks<Op>(n, input, output, count, chunk, reinterpret_cast<T*>(block));
  }
}

/// Reduces `count` elements of the n operands `operand(r)` into `out`;
/// `wide` holds `count` floats for float16 and bfloat16 (unused else).
template <reduce_op Op, class T, class Operand>
void reduce_operands(std::size_t n, Operand operand, std::size_t count, T* out, float* wide) {
  if constexpr (is_half_v<T>) {
    reduce_in_float<Op>(n, operand, static_cast<std::int64_t>(count), wide, out);
    return;
  }
  std::memcpy(out, operand(0), count * sizeof(T));
  for (std::size_t r = 1; r < n; ++r)
    combine_loop<Op>(out, operand(r), static_cast<std::int64_t>(count));
  if constexpr (Op == reduce_op::mean)
    divide_loop(out, static_cast<std::int64_t>(n), static_cast<std::int64_t>(count));
}

} // namespace lockstep::detail

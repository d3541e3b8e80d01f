#pragma once

// byte_reduction: the element-wise work that the point-to-point
// algorithms (recursive_doubling.hpp, halving_doubling.hpp) do on raw
// buffers of a dtype, as the ring does it (ring_collectives.hpp):
// float16 and bfloat16 are combined in float32 and rounded once at the
// end, MEAN is a SUM divided once by the world size, and integers wrap
// and divide as the ring's do, so every algorithm gives the ring's bits
// for integers.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "lockstep/dtype.hpp"
#include "lockstep/reduce_op.hpp"

namespace lockstep::detail {

/// `accumulator[i] = accumulator[i] op x[i]` on `bytes_count` bytes of
/// `type` (not a half type: those are combined in float32).
void combine_bytes(reduce_op op, dtype type, std::uint8_t* accumulator, const std::uint8_t* x,
                   std::size_t bytes_count);

/// `a[i] = a[i] op b[i]` when `a_first`, else `a[i] = b[i] op a[i]`, for
/// the `a.size()` bytes of `type` (not a half type; `b` as long as `a`).
/// `b` is scratch: it holds `b op a` afterwards when `!a_first`. The
/// operand order is what fixes a float's bits, so the algorithms always
/// put the lower ranks' operand first.
void combine_ordered(reduce_op op, dtype type, std::span<std::uint8_t> a,
                     std::span<std::uint8_t> b, bool a_first);

/// The all-reduce `reduce(op, type, data)` of a non-half type with MEAN
/// taken as SUM, wrapped as every lockstep reduction is: throws
/// value_error (naming `algorithm`) when `data` is not whole elements of
/// `type`; widens float16 and bfloat16 to float32 before and rounds once
/// after; divides a MEAN by `world` once at the end.
void reduce_as_ring_does(
    std::string_view algorithm, reduce_op op, dtype type, std::span<std::uint8_t> data,
    std::size_t world,
    const std::function<void(reduce_op, dtype, std::span<std::uint8_t>)>& reduce);

} // namespace lockstep::detail

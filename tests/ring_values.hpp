#pragma once

// The values that the ring collectives' tests reduce, and what they must
// give: small integers, so that every dtype holds every result exactly
// (tcp_ring_test over TCP, ring_collectives_test over the in-memory link).

#include "collectives/collective_fingerprint.hpp"

#include "lockstep/dtype.hpp"
#include "lockstep/float16.hpp"
#include "lockstep/reduce_op.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace lockstep::detail::test::ring_values {

/// Worker r's element i: small integers, so every dtype holds every sum,
/// min, max and product exactly.
inline long long value(std::size_t i, std::size_t r, reduce_op op) {
  if (op == reduce_op::prod)
    return static_cast<long long>((i + r) % 3 + 1);
  return static_cast<long long>((i * 7 + r * 3) % 11) - 5;
}

/// The expected element, computed exactly and converted once, as the ring
/// does (MEAN: the sum divided in T, halves in float).
template <class T>
T expected(std::size_t i, std::size_t world, reduce_op op) {
  long long acc = value(i, 0, op);
  for (std::size_t r = 1; r < world; ++r) {
    const auto x = value(i, r, op);
    switch (op) {
      case reduce_op::sum:
      case reduce_op::mean:
        acc += x;
        break;
      case reduce_op::min:
        acc = std::min(acc, x);
        break;
      case reduce_op::max:
        acc = std::max(acc, x);
        break;
      case reduce_op::prod:
        acc *= x;
        break;
    }
  }
  if (op != reduce_op::mean)
    return static_cast<T>(static_cast<float>(acc));
  if constexpr (is_half_v<T>)
    return T(static_cast<float>(acc) / static_cast<float>(world));
  else if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(static_cast<T>(acc) / static_cast<T>(world));
  else
    return static_cast<T>(acc / static_cast<long long>(world));
}

template <class T>
bool same_value(T a, T b) {
  if constexpr (is_half_v<T>)
    return static_cast<float>(a) == static_cast<float>(b);
  else
    return a == b;
}

inline collective_fingerprint fingerprint_of(std::uint64_t seq, reduce_op op, dtype type,
                                             std::size_t elements) {
  collective_fingerprint f;
  f.seq = seq;
  f.op = "all_reduce";
  f.reduction = std::string(to_string(op));
  f.dtype = type;
  f.shape = {static_cast<std::int64_t>(elements)};
  return f;
}

} // namespace lockstep::detail::test::ring_values

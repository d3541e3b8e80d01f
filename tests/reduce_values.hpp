#pragma once

// Values for reduction tests: closed-form inputs with their expected
// results, and reproducible values of mixed sign and magnitude for
// bit-for-bit comparisons.

#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>

/// Input of rank (replica) r, element i: r + i + 1, or 1 or 2 for prod.
inline double input_value(lockstep::reduce_op op, std::size_t r, std::size_t i) {
  if (op == lockstep::reduce_op::prod)
    return 1.0 + static_cast<double>((r + i) % 2);
  return static_cast<double>(r + i + 1);
}

/// Element i of `op` over input_value of ranks 0 .. n-1, in type T.
template <class T>
T expected_value(lockstep::reduce_op op, std::size_t n, std::size_t i) {
  using lockstep::reduce_op;
  const auto sum = static_cast<std::int64_t>(n * (i + 1) + n * (n - 1) / 2);
  switch (op) {
    case reduce_op::sum:
      return static_cast<T>(sum);
    case reduce_op::mean:
      if constexpr (std::is_floating_point_v<T>)
        return static_cast<T>(sum) / static_cast<T>(n);
      else
        return static_cast<T>(sum / static_cast<std::int64_t>(n));
    case reduce_op::min:
      return static_cast<T>(i + 1);
    case reduce_op::max:
      return static_cast<T>(i + n);
    case reduce_op::prod: {
      // Inputs with (r + i) odd hold 2: N/2 of them for even i, (N+1)/2 for odd i.
      const auto twos = i % 2 == 0 ? n / 2 : (n + 1) / 2;
      return static_cast<T>(std::int64_t{1} << twos);
    }
  }
  return T{};
}

/// A vector of `count` elements of `type`, element i holding `value(i)`.
inline lockstep::tensor make_input(lockstep::dtype type, std::int64_t count,
                                   const std::function<double(std::size_t)>& value) {
  auto t = lockstep::tensor::zeros(type, {count});
  lockstep::visit_dtype(type, [&]<class T>(T) {
    auto data = t.data<T>();
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<T>(value(i));
  });
  return t;
}

/// A reproducible stream of values: floats of mixed sign and magnitude (so
/// the order of operations shows in the bits), near 1 for prod; small
/// integers.
class mixed_values {
public:
  explicit mixed_values(std::uint64_t seed) : state_(0x9e3779b97f4a7c15ull * (seed + 1)) {}

  /// Fills `t` with the next values of the stream.
  void fill(lockstep::tensor& t, lockstep::reduce_op op) {
    lockstep::visit_dtype(t.dtype(), [&]<class T>(T) {
      auto data = t.data<T>();
      for (std::size_t i = 0; i < data.size(); ++i) {
        state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
        const auto u = static_cast<double>(state_ >> 11) / 9007199254740992.0; // [0, 1)
        const bool prod = op == lockstep::reduce_op::prod;
        double value;
        if constexpr (std::is_floating_point_v<T>)
          value = prod ? 0.5 + u : (u - 0.5) * (i % 3 == 0 ? 1e7 : 1e-3);
        else
          value = prod ? std::floor(u * 5) - 2 : std::floor(u * 2001) - 1000;
        data[i] = static_cast<T>(value);
      }
    });
  }

private:
  std::uint64_t state_;
};

#pragma once

// The storage types of the 16-bit floating dtypes: IEEE 754 binary16
// (dtype::f16, TF's float16) and bfloat16 (dtype::bf16, the upper half of a
// binary32). They hold bits and convert to and from float explicitly; they
// have no arithmetic, so no code computes in 16 bits by accident: kernels
// widen to float, compute, and round back once (docs/api.md, "Dtypes").

#include <bit>
#include <compare>
#include <cstdint>

namespace lockstep {

namespace detail {

/// binary16 bits -> float, exact (every binary16 value is a float). Inf and
/// NaN keep their sign; a NaN keeps its payload (shifted into the float's
/// upper mantissa bits), so f16 -> float -> f16 gives back every pattern.
constexpr float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) // Inf, NaN
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) { // zero, subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

/// float -> binary16 bits, rounded to nearest, ties to even. Values from
/// 65520 up (the midpoint between 65504, the largest binary16, and 2^16)
/// become Inf; values below 2^-14 become subnormals or zero, with the same
/// rounding. A NaN stays a NaN with its sign and the top 10 bits of its
/// payload (a payload that would vanish becomes the quiet bit).
constexpr std::uint16_t float_to_f16_bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) { // NaN
    const auto payload = static_cast<std::uint16_t>((magnitude >> 13) & 0x3ffu);
    return static_cast<std::uint16_t>(sign | 0x7c00u | (payload != 0 ? payload : 0x200u));
  }
  if (magnitude >= 0x477ff000u) // >= 65520, Inf included
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) { // below 2^-14: subnormal or zero
    // Adding 0.5 leaves float's unit in the last place at 2^-24, binary16's
    // subnormal step, so the FPU rounds (to nearest even) for us.
    const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits
  // to nearest even; a carry moves into the exponent, as it should.
  const std::uint32_t odd = (magnitude >> 13) & 1u;
  return static_cast<std::uint16_t>(sign | ((magnitude + 0xc8000fffu + odd) >> 13));
}

/// bfloat16 bits -> float, exact.
constexpr float bf16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// float -> bfloat16 bits, rounded to nearest, ties to even (overflow
/// gives Inf, as it does in float). A NaN stays a quiet NaN with its sign.
constexpr std::uint16_t float_to_bf16_bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

} // namespace detail

/// An IEEE 754 binary16 value (TF's float16): 1 sign bit, 5 exponent bits,
/// 10 mantissa bits; largest finite 65504, smallest normal 2^-14, smallest
/// subnormal 2^-24. The element type of dtype::f16.
struct float16_t {
  /// The bit pattern.
  std::uint16_t bits = 0;

  /// +0.
  constexpr float16_t() = default;

  /// `value` rounded to nearest, ties to even (see float_to_f16_bits).
  constexpr explicit float16_t(float value) : bits(detail::float_to_f16_bits(value)) {
  }

  /// The value with bit pattern `pattern`.
  static constexpr float16_t from_bits(std::uint16_t pattern) {
    float16_t result;
    result.bits = pattern;
    return result;
  }

  /// The exact value as float.
  constexpr explicit operator float() const { return detail::f16_bits_to_float(bits); }

  /// The exact value as double.
  constexpr explicit operator double() const { return static_cast<float>(*this); }

  /// Compared as values, as float compares: NaN is unequal to everything,
  /// +0 equals -0.
  friend constexpr bool operator==(float16_t lhs, float16_t rhs) {
    return static_cast<float>(lhs) == static_cast<float>(rhs);
  }
  friend constexpr std::partial_ordering operator<=>(float16_t lhs, float16_t rhs) {
    return static_cast<float>(lhs) <=> static_cast<float>(rhs);
  }
};

/// A bfloat16 value: the upper 16 bits of a binary32 (8 exponent bits, 7
/// mantissa bits), so float's range with 8 bits of precision. The element
/// type of dtype::bf16.
struct bfloat16_t {
  /// The bit pattern.
  std::uint16_t bits = 0;

  /// +0.
  constexpr bfloat16_t() = default;

  /// `value` rounded to nearest, ties to even; NaN stays a quiet NaN.
  constexpr explicit bfloat16_t(float value) : bits(detail::float_to_bf16_bits(value)) {
  }

  /// The value with bit pattern `pattern`.
  static constexpr bfloat16_t from_bits(std::uint16_t pattern) {
    bfloat16_t result;
    result.bits = pattern;
    return result;
  }

  /// The exact value as float.
  constexpr explicit operator float() const { return detail::bf16_bits_to_float(bits); }

  /// The exact value as double.
  constexpr explicit operator double() const { return static_cast<float>(*this); }

  /// Compared as values, as float compares.
  friend constexpr bool operator==(bfloat16_t lhs, bfloat16_t rhs) {
    return static_cast<float>(lhs) == static_cast<float>(rhs);
  }
  friend constexpr std::partial_ordering operator<=>(bfloat16_t lhs, bfloat16_t rhs) {
    return static_cast<float>(lhs) <=> static_cast<float>(rhs);
  }
};

static_assert(sizeof(float16_t) == 2 && sizeof(bfloat16_t) == 2);

} // namespace lockstep

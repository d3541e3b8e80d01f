#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "lockstep/error.hpp"
#include "lockstep/float16.hpp"

namespace lockstep {

/// The element type of a tensor (TF's tf.dtypes.DType). f16 (IEEE binary16,
/// TF's float16) and bf16 (bfloat16) are stored as float16_t and
/// bfloat16_t; kernels compute them in float and round once per operation.
enum class dtype : std::uint8_t { f32, f64, i32, i64, f16, bf16 };

/// TF's name of `type`: "float32", "float64", "int32", "int64", "float16"
/// or "bfloat16".
constexpr std::string_view to_string(dtype type) {
  switch (type) {
    case dtype::f32:
      return "float32";
    case dtype::f64:
      return "float64";
    case dtype::i32:
      return "int32";
    case dtype::i64:
      return "int64";
    case dtype::f16:
      return "float16";
    case dtype::bf16:
      return "bfloat16";
  }
  throw dtype_error("to_string: invalid dtype");
}

/// Bytes per element of `type`.
constexpr std::size_t size_of(dtype type) {
  switch (type) {
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f64:
    case dtype::i64:
      return 8;
    case dtype::f16:
    case dtype::bf16:
      return 2;
  }
  throw dtype_error("size_of: invalid dtype");
}

/// True for the integer dtypes (i32, i64).
constexpr bool is_integer(dtype type) {
  return type == dtype::i32 || type == dtype::i64;
}

/// True for the floating dtypes (f32, f64, f16, bf16).
constexpr bool is_floating(dtype type) {
  return !is_integer(type);
}

/// True for the 16-bit floating dtypes (f16, bf16), which kernels widen to
/// float to compute.
constexpr bool is_half(dtype type) {
  return type == dtype::f16 || type == dtype::bf16;
}

/// True for the 16-bit floating element types float16_t and bfloat16_t.
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

/// True for the floating element types: float, double, float16_t, bfloat16_t.
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || is_half_v<T>;

namespace detail {

template <class T>
constexpr dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return dtype::f32;
  else if constexpr (std::is_same_v<T, double>)
    return dtype::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return dtype::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return dtype::i64;
  else if constexpr (std::is_same_v<T, float16_t>)
    return dtype::f16;
  else if constexpr (std::is_same_v<T, bfloat16_t>)
    return dtype::bf16;
  else
    static_assert(!std::is_same_v<T, T>, "tensor elements are float, double, std::int32_t, "
                                         "std::int64_t, float16_t or bfloat16_t");
}

} // namespace detail

/// The dtype of the C++ element type `T`; only float, double, std::int32_t,
/// std::int64_t, float16_t and bfloat16_t have one (any other `T` fails to
/// compile).
template <class T>
inline constexpr dtype dtype_of_v = detail::dtype_of<T>();

/// Calls `f(T{})` with the C++ element type `T` of `type` and returns its
/// result, so a kernel is written once as a generic lambda for all dtypes.
/// float16_t and bfloat16_t have no arithmetic: a lambda that computes
/// with `T` branches on `is_half_v<T>` and computes in float.
template <class F>
decltype(auto) visit_dtype(dtype type, F&& f) {
  switch (type) {
    case dtype::f32:
      return std::forward<F>(f)(float{});
    case dtype::f64:
      return std::forward<F>(f)(double{});
    case dtype::i32:
      return std::forward<F>(f)(std::int32_t{});
    case dtype::i64:
      return std::forward<F>(f)(std::int64_t{});
    case dtype::f16:
      return std::forward<F>(f)(float16_t{});
    case dtype::bf16:
      return std::forward<F>(f)(bfloat16_t{});
  }
  throw dtype_error("visit_dtype: invalid dtype");
}

} // namespace lockstep

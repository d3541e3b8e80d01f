#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "lockstep/error.hpp"

namespace lockstep {

/// The element type of a tensor (TF's tf.dtypes.DType).
enum class dtype : std::uint8_t { f32, f64, i32, i64 };

/// TF's name of `type`: "float32", "float64", "int32" or "int64".
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
  }
  throw dtype_error("size_of: invalid dtype");
}

/// True for the integer dtypes (i32, i64).
constexpr bool is_integer(dtype type) {
  return type == dtype::i32 || type == dtype::i64;
}

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
  else
    static_assert(!std::is_same_v<T, T>,
                  "tensor elements are float, double, std::int32_t or std::int64_t");
}

} // namespace detail

/// The dtype of the C++ element type `T`; only float, double, std::int32_t
/// and std::int64_t have one (any other `T` fails to compile).
template <class T>
inline constexpr dtype dtype_of_v = detail::dtype_of<T>();

/// Calls `f(T{})` with the C++ element type `T` of `type` and returns its
/// result, so a kernel is written once as a generic lambda for all dtypes.
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
  }
  throw dtype_error("visit_dtype: invalid dtype");
}

} // namespace lockstep

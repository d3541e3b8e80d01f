#pragma once

// Helpers of the 'gpu' suite: host copies of device tensors, byte-for-byte
// comparison, and reproducible NaN-free values of every dtype that the
// host and the device kernels must treat alike.

#include "lockstep/device_spec.hpp"
#include "lockstep/dtype.hpp"
#include "lockstep/float16.hpp"
#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

#include "devices/device_registry.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gpu_test {

/// `t` itself when the host can read it, else a copy on /cpu:0.
inline lockstep::tensor on_host(const lockstep::tensor& t) {
  return t.buffer().host_accessible() ? t : t.to(lockstep::cpu_device(0));
}

/// Same dtype, shape and bytes (device tensors are copied to the host).
inline bool same_bytes(const lockstep::tensor& a, const lockstep::tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return false;
  if (a.byte_size() == 0)
    return true;
  const auto ha = on_host(a);
  const auto hb = on_host(b);
  return std::memcmp(ha.raw_data(), hb.raw_data(), ha.byte_size()) == 0;
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// `/gpu:<k>`, canonical.
inline lockstep::device_spec gpu(int k) {
  return lockstep::device_spec{"/gpu:" + std::to_string(k)}.canonical();
}

/// Fills a host tensor with reproducible bytes (any bit pattern, NaN
/// included: for copies only).
inline void fill_bytes(lockstep::tensor& t, std::uint64_t seed) {
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  const auto size = t.byte_size();
  std::uint64_t state = 0x9e3779b97f4a7c15ull * (seed + 1);
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const std::uint64_t word = state ^ (state >> 29);
    std::memcpy(bytes + i, &word, 8);
  }
  for (; i < size; ++i)
    bytes[i] = static_cast<unsigned char>(i * 131 + seed);
}

/// What values are for: `general` for sums, differences, minima, maxima,
/// axpy, scaling and division; `product` near 1 (floating) or in -2..2
/// (integers) so products of up to 8 factors stay in range.
enum class purpose { general, product };

/// A reproducible, NaN-free value: floating ones of mixed sign and
/// magnitude with fractional parts (so half-type results round), some
/// +0 and -0; integers in -1000..1000. Half types stay far below 65504
/// after 8 additions or a product of two.
inline double value_at(lockstep::dtype type, std::uint64_t seed, std::int64_t i, purpose p) {
  std::uint64_t state = 0xbf58476d1ce4e5b9ull * (seed + 1) + 0x94d049bb133111ebull
                        * static_cast<std::uint64_t>(i + 1);
  state ^= state >> 31;
  state *= 0xd6e8feb86659fd93ull;
  state ^= state >> 32;
  const double u = static_cast<double>(state >> 11) / 9007199254740992.0; // [0, 1)
  if (lockstep::is_integer(type))
    return p == purpose::product ? std::floor(u * 5) - 2 : std::floor(u * 2001) - 1000;
  if (p == purpose::product)
    return 0.5 + u;
  if (i % 17 == 5)
    return 0.0;
  if (i % 17 == 11)
    return -0.0;
  const double scale = lockstep::is_half(type) ? (i % 3 == 0 ? 100.0 : 0.25)
                                               : (i % 3 == 0 ? 1e6 : 1e-3);
  return (u - 0.5) * scale;
}

/// A host tensor of `shape` with value_at values.
inline lockstep::tensor values(lockstep::dtype type, lockstep::shape_t shape, std::uint64_t seed,
                               purpose p = purpose::general,
                               const lockstep::device_spec& device = lockstep::cpu_device(0)) {
  auto t = lockstep::tensor::zeros(type, std::move(shape), lockstep::cpu_device(0));
  lockstep::visit_dtype(type, [&]<class T>(T) {
    auto elements = t.template data<T>();
    for (std::size_t i = 0; i < elements.size(); ++i) {
      const double v = value_at(type, seed, static_cast<std::int64_t>(i), p);
      if constexpr (lockstep::is_half_v<T>)
        elements[i] = T(static_cast<float>(v));
      else
        elements[i] = static_cast<T>(v);
    }
  });
  return device.canonical() == lockstep::cpu_device(0).canonical() ? t : t.to(device);
}

inline constexpr lockstep::dtype all_dtypes[] = {lockstep::dtype::f32, lockstep::dtype::f64,
                                                 lockstep::dtype::i32, lockstep::dtype::i64,
                                                 lockstep::dtype::f16, lockstep::dtype::bf16};

inline constexpr lockstep::reduce_op all_ops[] = {lockstep::reduce_op::sum,
                                                  lockstep::reduce_op::mean,
                                                  lockstep::reduce_op::min,
                                                  lockstep::reduce_op::max,
                                                  lockstep::reduce_op::prod};

inline std::string name_of(lockstep::dtype type) {
  return std::string{lockstep::to_string(type)};
}

} // namespace gpu_test

// float16 and bfloat16: conversions from and to float (exact values, ties
// to even, overflow, subnormals, NaN; every f16 bit pattern round-trips),
// tensors of them, the host kernels and the reductions computing in float
// and rounding once (all-reduce SUM, MEAN, MAX through every cross-device
// op and the collective core), and checkpoints of f16/bf16 variables. No
// actor system: suite 'unit'.

#include "lockstep/float16.hpp"

#include <doctest/doctest.h>

#include "file_support.hpp"

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "collectives/allreduce_slices.hpp"
#include "collectives/collective_group.hpp"
#include "lockstep/checkpoint.hpp"
#include "lockstep/cross_device_ops.hpp"
#include "lockstep/dtype.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/variable.hpp"

using namespace lockstep;
using namespace std::chrono_literals;

namespace {

/// The value of binary16 pattern `bits`, computed from the definition.
double f16_reference(std::uint16_t bits) {
  const int sign = (bits & 0x8000) ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0x1f)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0)
    return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

std::uint16_t f16(float value) {
  return float16_t(value).bits;
}

std::uint16_t bf16(float value) {
  return bfloat16_t(value).bits;
}

float next_up(float value) {
  return std::nextafter(value, std::numeric_limits<float>::infinity());
}

float next_down(float value) {
  return std::nextafter(value, -std::numeric_limits<float>::infinity());
}

bool same_bytes(const tensor& a, const tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape()
         && std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

} // namespace

// -- conversions --------------------------------------------------------------

TEST_CASE("float16 converts exact values, extremes and subnormals") {
  CHECK(f16(0.0f) == 0x0000);
  CHECK(f16(-0.0f) == 0x8000);
  CHECK(f16(1.0f) == 0x3c00);
  CHECK(f16(-2.0f) == 0xc000);
  CHECK(f16(0.5f) == 0x3800);
  CHECK(f16(65504.0f) == 0x7bff);               // largest finite
  CHECK(f16(0x1p-14f) == 0x0400);               // smallest normal
  CHECK(f16(0x1p-24f) == 0x0001);               // smallest subnormal
  CHECK(f16(1023 * 0x1p-24f) == 0x03ff);        // largest subnormal
  CHECK(f16(-0x1p-24f) == 0x8001);
  CHECK(static_cast<float>(float16_t::from_bits(0x7bff)) == 65504.0f);
  CHECK(static_cast<float>(float16_t::from_bits(0x0001)) == 0x1p-24f);
  CHECK(static_cast<double>(float16_t::from_bits(0x3555)) == f16_reference(0x3555));
}

TEST_CASE("float16 rounds to nearest, ties to even") {
  CHECK(f16(1.0f + 0x1p-11f) == 0x3c00);            // tie: down to even
  CHECK(f16(1.0f + 3 * 0x1p-11f) == 0x3c02);        // tie: up to even
  CHECK(f16(next_up(1.0f + 0x1p-11f)) == 0x3c01);   // above the tie
  CHECK(f16(next_down(1.0f + 3 * 0x1p-11f)) == 0x3c01);
  CHECK(f16(0x1p-25f) == 0x0000);                   // subnormal tie: to 0
  CHECK(f16(3 * 0x1p-25f) == 0x0002);               // subnormal tie: to 2
  CHECK(f16(next_up(0x1p-25f)) == 0x0001);
  CHECK(f16(0x1p-26f) == 0x0000);
  CHECK(f16(1023.5f * 0x1p-24f) == 0x0400);         // up into the normals
  CHECK(f16(-(1.0f + 3 * 0x1p-11f)) == 0xbc02);

  // Every midpoint between neighbouring finite values (exact in float)
  // goes to the even one; one float step either side goes to the nearer.
  for (std::uint16_t bits = 0; bits < 0x7bff; ++bits) {
    const auto low = static_cast<float>(float16_t::from_bits(bits));
    const auto high = static_cast<float>(float16_t::from_bits(static_cast<std::uint16_t>(bits + 1)));
    const float middle = low + (high - low) / 2;
    const auto even = (bits % 2 == 0) ? bits : static_cast<std::uint16_t>(bits + 1);
    REQUIRE(f16(middle) == even);
    REQUIRE(f16(next_down(middle)) == bits);
    REQUIRE(f16(next_up(middle)) == bits + 1);
    REQUIRE(f16(-middle) == (even | 0x8000));
  }
}

TEST_CASE("float16 overflows to infinity from 65520 on") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(f16(65519.0f) == 0x7bff);
  CHECK(f16(next_down(65520.0f)) == 0x7bff);
  CHECK(f16(65520.0f) == 0x7c00);
  CHECK(f16(1e6f) == 0x7c00);
  CHECK(f16(-1e6f) == 0xfc00);
  CHECK(f16(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(f16(inf) == 0x7c00);
  CHECK(f16(-inf) == 0xfc00);
  CHECK(static_cast<float>(float16_t::from_bits(0x7c00)) == inf);
  CHECK(static_cast<float>(float16_t::from_bits(0xfc00)) == -inf);
}

TEST_CASE("float16 keeps NaN a NaN") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(f16(nan) == 0x7e00);
  CHECK(f16(-nan) == 0xfe00);
  // A payload only in float's low bits still gives a NaN, not infinity.
  CHECK(f16(std::bit_cast<float>(0x7f800001u)) == 0x7e00);
  CHECK(std::isnan(static_cast<float>(float16_t::from_bits(0x7c01))));
  CHECK(std::isnan(static_cast<float>(float16_t::from_bits(0xfe00))));
  CHECK_FALSE(float16_t::from_bits(0x7e00) == float16_t::from_bits(0x7e00));
  CHECK(float16_t::from_bits(0x0000) == float16_t::from_bits(0x8000));
  CHECK(float16_t(1.0f) < float16_t(2.0f));
}

TEST_CASE("every float16 bit pattern round-trips through float, with its value") {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = float16_t::from_bits(static_cast<std::uint16_t>(bits));
    const auto value = static_cast<float>(h);
    const auto reference = f16_reference(static_cast<std::uint16_t>(bits));
    if (std::isnan(reference))
      REQUIRE(std::isnan(value));
    else
      REQUIRE(static_cast<double>(value) == reference);
    REQUIRE(std::signbit(value) == ((bits & 0x8000) != 0));
    REQUIRE(float16_t(value).bits == bits);
  }
}

TEST_CASE("bfloat16 rounds to nearest even, overflows to infinity, keeps NaN quiet") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(bf16(1.0f) == 0x3f80);
  CHECK(bf16(-2.0f) == 0xc000);
  CHECK(bf16(1.0f + 0x1p-8f) == 0x3f80);            // tie: down to even
  CHECK(bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);        // tie: up to even
  CHECK(bf16(next_up(1.0f + 0x1p-8f)) == 0x3f81);
  CHECK(bf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(bf16(inf) == 0x7f80);
  CHECK(bf16(-inf) == 0xff80);
  CHECK(bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(bf16(0x1p-133f) == 0x0001);                  // a subnormal
  CHECK(bf16(std::numeric_limits<float>::quiet_NaN()) == 0x7fc0);
  // A signalling NaN whose payload is only in the dropped bits stays a
  // (quiet) NaN rather than becoming infinity.
  CHECK(bf16(std::bit_cast<float>(0x7f800001u)) == 0x7fc0);
  CHECK(bf16(std::bit_cast<float>(0xff800001u)) == 0xffc0);
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = bfloat16_t::from_bits(static_cast<std::uint16_t>(bits));
    const auto value = static_cast<float>(b);
    REQUIRE(std::bit_cast<std::uint32_t>(value) == bits << 16);
    if (!std::isnan(value))
      REQUIRE(bfloat16_t(value).bits == bits);
    else
      REQUIRE(std::isnan(static_cast<float>(bfloat16_t(value))));
  }
}

// -- dtypes and tensors -------------------------------------------------------

TEST_CASE("f16 and bf16 are dtypes with 16-bit storage types") {
  CHECK(to_string(dtype::f16) == "float16");
  CHECK(to_string(dtype::bf16) == "bfloat16");
  CHECK(size_of(dtype::f16) == 2);
  CHECK(size_of(dtype::bf16) == 2);
  CHECK_FALSE(is_integer(dtype::f16));
  CHECK_FALSE(is_integer(dtype::bf16));
  CHECK(is_floating(dtype::bf16));
  CHECK(is_half(dtype::f16));
  CHECK_FALSE(is_half(dtype::f32));
  static_assert(dtype_of_v<float16_t> == dtype::f16);
  static_assert(dtype_of_v<bfloat16_t> == dtype::bf16);
  CHECK(visit_dtype(dtype::f16, []<class T>(T) { return dtype_of_v<T>; }) == dtype::f16);
  CHECK(visit_dtype(dtype::bf16, []<class T>(T) { return dtype_of_v<T>; }) == dtype::bf16);

  const auto t = tensor::from<float16_t>({float16_t(1.0f), float16_t(0.5f), float16_t(-3.0f)});
  CHECK(t.dtype() == dtype::f16);
  CHECK(t.byte_size() == 6);
  CHECK(t.at<float16_t>(2).bits == 0xc200);
  CHECK(t.as_double(1) == 0.5);
  CHECK(t.to_string().starts_with("tensor<float16>[3]{1, 0.5, -3} @"));
  CHECK_THROWS_AS(t.data<float>(), dtype_error);
  const auto b = tensor::filled(dtype::bf16, {2}, 1.5);
  CHECK(b.data<bfloat16_t>()[1].bits == 0x3fc0);
  CHECK(b.to_string().starts_with("tensor<bfloat16>[2]{1.5, 1.5} @"));
  CHECK(tensor::zeros(dtype::f16, {2}) == tensor::from<float16_t>({float16_t(0.0f), float16_t(-0.0f)}));
  CHECK(b.copy() == b);
}

// -- kernels ------------------------------------------------------------------

TEST_CASE_TEMPLATE("host kernels on 16-bit floats compute in float and round once", T,
                   float16_t, bfloat16_t) {
  // 2048 + 1 is a tie in float16 (step 2 there), 256 + 1 one in bfloat16.
  const float big = std::is_same_v<T, float16_t> ? 2048.0f : 256.0f;
  auto from = [](std::vector<float> values) {
    std::vector<T> converted;
    for (auto v : values)
      converted.push_back(T(v));
    return tensor::from<T>(converted);
  };
  auto values = [](const tensor& t) {
    std::vector<float> out;
    for (auto v : t.data<T>())
      out.push_back(static_cast<float>(v));
    return out;
  };
  // 200 elements: more than one 64-element block.
  std::vector<float> a(200, big);
  std::vector<float> ones(200, 1.0f);
  std::vector<float> threes(200, 3.0f);
  {
    auto acc = from(a);
    add_into(acc, from(ones));
    CHECK(values(acc) == std::vector<float>(200, big));          // tie to even: down
    add_into(acc, from(threes));
    CHECK(values(acc) == std::vector<float>(200, big + 4.0f));  // 2051 / 259: tie, up
    subtract_into(acc, from(threes));
    CHECK(values(acc) == std::vector<float>(200, big));          // big + 1: tie, down
    max_into(acc, from(threes));
    CHECK(values(acc) == std::vector<float>(200, big));
    min_into(acc, from(threes));
    CHECK(values(acc) == std::vector<float>(200, 3.0f));
    multiply_into(acc, acc); // shares the buffer
    CHECK(values(acc) == std::vector<float>(200, 9.0f));
    scale_into(acc, 0.5);
    CHECK(values(acc) == std::vector<float>(200, 4.5f));
    axpy_into(acc, 2.0, from(ones));
    CHECK(values(acc) == std::vector<float>(200, 6.5f));
    divide_into(acc, 2);
    CHECK(values(acc) == std::vector<float>(200, 3.25f));
    auto target = tensor::zeros(dtype_of_v<T>, {200});
    copy_into(target, acc);
    CHECK(target == acc);
  }
  {
    // A column of big, 1, 1, 1, 1: rounding after each add would stay at
    // big; summing in float and rounding once gives big + 4.
    std::vector<float> column{big, 1, 1, 1, 1};
    std::vector<float> matrix;
    for (auto v : column)
      for (int j = 0; j < 70; ++j)
        matrix.push_back(v);
    std::vector<T> converted;
    for (auto v : matrix)
      converted.push_back(T(v));
    const auto x = tensor::from<T>(converted, {5, 70});
    const auto sums = reduce_sum_axis(x, 0);
    CHECK(sums.shape() == shape_t{70});
    CHECK(values(sums) == std::vector<float>(70, big + 4.0f));
    const auto rows = reduce_sum_axis(x.reshaped({5, 70, 1}), 1);
    CHECK(rows.shape() == shape_t{5, 1});
    // 70 * big is exact in float; in T it rounds once.
    CHECK(static_cast<float>(rows.template data<T>()[0]) == static_cast<float>(T(70.0f * big)));
    CHECK(static_cast<float>(rows.template data<T>()[1]) == 70.0f);
  }
}

// -- reductions ---------------------------------------------------------------

namespace {

/// Component r of element i: exact in T and summed exactly in float; the
/// sums are not exact in T, so rounding after each combine would differ.
template <class T>
float component_value(std::size_t r, std::size_t i) {
  const float big = std::is_same_v<T, float16_t> ? 2048.0f : 256.0f;
  return r == 0 ? big + 2.0f * static_cast<float>(i % 5)
                : static_cast<float>((i + r) % 3) + 0.5f * static_cast<float>(r % 2);
}

template <class T>
per_replica<tensor> half_components(std::size_t n, std::int64_t count) {
  std::vector<tensor> parts;
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<T> values;
    for (std::int64_t i = 0; i < count; ++i)
      values.push_back(T(component_value<T>(r, static_cast<std::size_t>(i))));
    parts.push_back(tensor::from<T>(values, {count}, cpu_device(static_cast<int>(r))));
  }
  return per_replica<tensor>{std::move(parts)};
}

/// The reduction computed in float (in rank order) and rounded once.
template <class T>
tensor expected_reduction(reduce_op op, std::size_t n, std::int64_t count) {
  std::vector<T> out;
  for (std::int64_t i = 0; i < count; ++i) {
    float total = component_value<T>(0, static_cast<std::size_t>(i));
    for (std::size_t r = 1; r < n; ++r) {
      const auto v = component_value<T>(r, static_cast<std::size_t>(i));
      total = op == reduce_op::max ? (total < v ? v : total) : total + v;
    }
    if (op == reduce_op::mean)
      total /= static_cast<float>(n);
    out.push_back(T(total));
  }
  return tensor::from<T>(out, {count});
}

} // namespace

TEST_CASE_TEMPLATE("all-reduce of 16-bit floats sums in float and rounds once", T, float16_t,
                   bfloat16_t) {
  slice_all_reduce slices;
  reduction_to_one_device one;
  hierarchical_copy hierarchical{0};
  for (std::size_t n : {2, 3, 4, 7})
    for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::max})
      for (std::int64_t count : {0, 1, 7, 100, 1000, 20011}) {
        CAPTURE(n);
        CAPTURE(to_string(op));
        CAPTURE(count);
        const auto value = half_components<T>(n, count);
        const auto want = expected_reduction<T>(op, n, count);
        const destinations where{value};
        for (cross_device_ops* ops : {static_cast<cross_device_ops*>(&slices),
                                      static_cast<cross_device_ops*>(&one),
                                      static_cast<cross_device_ops*>(&hierarchical)}) {
          CAPTURE(ops->name());
          const auto got = ops->reduce(op, value, where);
          REQUIRE(got.size() == n);
          for (std::size_t r = 0; r < n; ++r) {
            CHECK(same_bytes(got[r], want));
            CHECK(got[r].device() == cpu_device(static_cast<int>(r)).canonical());
          }
        }
      }
}

TEST_CASE_TEMPLATE("allreduce_slices of 16-bit floats: every chunk path, bit-identical on every rank",
                   T, float16_t, bfloat16_t) {
  for (std::size_t n : {1, 2, 3, 4, 7})
    for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::max})
      // 100 elements fit the inline path; 997 with 64-byte chunks take many
      // chunks per slice.
      for (auto [count, chunk_bytes] : {std::pair<std::int64_t, std::size_t>{100, 0},
                                        {997, 64}, {12343, 0}}) {
        CAPTURE(n);
        CAPTURE(to_string(op));
        CAPTURE(count);
        const auto inputs = half_components<T>(n, count);
        std::vector<tensor> outputs;
        for (std::size_t r = 0; r < n; ++r)
          outputs.push_back(tensor::zeros(dtype_of_v<T>, {count}));
        detail::collective_group group{n, "half"};
        std::vector<std::string> failures(n);
        std::vector<std::thread> ranks;
        for (std::size_t rank = 0; rank < n; ++rank)
          ranks.emplace_back([&, rank] {
            try {
              detail::allreduce_slices(group, rank, op, inputs[rank], outputs[rank],
                                       {.timeout = 20s, .tag = "", .chunk_bytes = chunk_bytes});
            } catch (const std::exception& e) {
              failures[rank] = e.what();
            }
          });
        for (auto& rank : ranks)
          rank.join();
        for (std::size_t r = 0; r < n; ++r) {
          CHECK_MESSAGE(failures[r].empty(), failures[r]);
          CHECK(same_bytes(outputs[r], expected_reduction<T>(op, n, count)));
        }
      }
}

// -- variables and checkpoints ------------------------------------------------

TEST_CASE("f16 and bf16 variables update through the host kernels") {
  variable v{tensor::from<float16_t>({float16_t(2048.0f), float16_t(1.0f)}), {.name = "v"}};
  v.assign_add(tensor::from<float16_t>({float16_t(3.0f), float16_t(0.5f)}));
  CHECK(v.value() == tensor::from<float16_t>({float16_t(2052.0f), float16_t(1.5f)}));
  v.assign_sub(tensor::from<float16_t>({float16_t(3.0f), float16_t(0.5f)}));
  CHECK(v.value() == tensor::from<float16_t>({float16_t(2048.0f), float16_t(1.0f)}));
  variable b{tensor::filled(dtype::bf16, {3}, 1.0), {.name = "b"}};
  b.assign(tensor::filled(dtype::bf16, {3}, 0.25));
  b.assign_add(tensor::filled(dtype::bf16, {3}, 0.5));
  CHECK(b.value() == tensor::filled(dtype::bf16, {3}, 0.75));
  CHECK_THROWS_AS(b.assign_add(tensor::filled(dtype::f32, {3}, 1.0)), dtype_error);
}


TEST_CASE("f16 and bf16 variables round-trip through a checkpoint bit for bit") {
  temporary_directory dir{"lockstep_float16_test"};
  const auto path = dir.path() / "half.safetensors";
  std::vector<float16_t> h;
  for (std::uint16_t bits : {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0xfbff, 0x3555})
    h.push_back(float16_t::from_bits(bits));
  std::vector<bfloat16_t> b;
  for (std::uint16_t bits : {0x0000, 0x8000, 0x0001, 0x3f80, 0x7f7f, 0xff7f, 0x4049})
    b.push_back(bfloat16_t::from_bits(bits));
  const auto saved_h = tensor::from<float16_t>(h, {3, 3});
  const auto saved_b = tensor::from<bfloat16_t>(b);
  variable vh{saved_h, {.name = "half"}};
  variable vb{saved_b, {.name = "brain"}};
  save(path, {vh, vb}, 3);
  variable th{tensor::zeros(dtype::f16, {3, 3}), {.name = "half"}};
  variable tb{tensor::zeros(dtype::bf16, {7}), {.name = "brain"}};
  CHECK(restore(path, {th, tb}).step == 3);
  CHECK(same_bytes(th.value(), saved_h));
  CHECK(same_bytes(tb.value(), saved_b));
  // The dtypes are the safetensors names F16 and BF16.
  std::ifstream file{path, std::ios::binary};
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"dtype\":\"F16\"") != std::string::npos);
  CHECK(text.find("\"dtype\":\"BF16\"") != std::string::npos);
  // A restore into a variable of another dtype is refused.
  variable wrong{tensor::zeros(dtype::f32, {3, 3}), {.name = "half"}};
  CHECK_THROWS(restore(path, {wrong}));
  // Non-finite values are refused, as for float32.
  variable infinite{tensor::from<float16_t>({float16_t::from_bits(0x7c00)}), {.name = "inf"}};
  CHECK_THROWS_AS(save(dir.path() / "inf.safetensors", {infinite}, 1), value_error);
}

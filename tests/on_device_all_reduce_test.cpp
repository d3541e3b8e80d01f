// The device kinds' convert and reduce_buffers kernels and the
// cross_device_ops built on them, in host memory: detail::reduce_buffers
// and detail::converted against reduction_to_one_device and the host's
// float16/bfloat16 conversions bit for bit, on_device_all_reduce on CPU
// devices (and across memory domains of a simulated kind), choose_the_best
// and nccl_all_reduce where the process has no CUDA device, and
// lockstep/gpu.hpp without a GPU. Every dtype and op; 1, 2, 3, 4 and 7
// inputs; 0, 1 and 65 elements (65: past one 64-element block); values
// whose reductions are exact and values whose reductions round.
// Deterministic, no actor system: suite 'unit'.

#include "lockstep/config.hpp"
#include "lockstep/cross_device_ops.hpp"
#include "lockstep/error.hpp"
#include "lockstep/float16.hpp"
#include "lockstep/gpu.hpp"
#include "lockstep/tensor.hpp"
#include "lockstep/values.hpp"

#include "devices/device_registry.hpp"

#include "device_components.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

using namespace lockstep;

namespace {

constexpr int input_counts[] = {1, 2, 3, 4, 7};
constexpr std::int64_t element_counts[] = {0, 1, 65};
constexpr dtype all_dtypes[] = {dtype::f32, dtype::f64, dtype::i32,
                                dtype::i64, dtype::f16, dtype::bf16};
constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max,
                                 reduce_op::prod};

/// exact: device_components.hpp's inputs, whose reductions are exact in
/// every dtype (closed forms there). rounding: values of mixed magnitude
/// whose sums, means and products round (and still fit float16).
enum class value_set { exact, rounding };

const char* name_of(value_set v) {
  return v == value_set::exact ? "exact" : "rounding";
}

std::string name_of(dtype type) {
  return std::string{to_string(type)};
}

/// Element i of input r: exact or rounding values for `op`.
double value_of(value_set set, reduce_op op, dtype type, std::int64_t i, int r) {
  if (set == value_set::exact)
    return input(op, i, r);
  std::uint64_t state = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(i + 1)
                        + 0xbf58476d1ce4e5b9ull * static_cast<std::uint64_t>(r + 1)
                        + static_cast<std::uint64_t>(op) * 977 + static_cast<std::uint64_t>(type);
  state ^= state >> 31;
  state *= 0x94d049bb133111ebull;
  state ^= state >> 29;
  const double u = static_cast<double>(state >> 11) / 9007199254740992.0; // [0, 1)
  const bool prod = op == reduce_op::prod;
  if (is_integer(type))
    return prod ? std::floor(u * 5) - 2 : std::floor(u * 2001) - 1000;
  if (prod)
    return 0.5 + u;
  // float16 and bfloat16 stay below 65504 even summed 7 times.
  const double large = is_half(type) ? 2000.0 : 1e7;
  return (u - 0.5) * (i % 3 == 0 ? large : 1e-2);
}

/// Input r: `count` elements of `set` on `device`.
tensor input_tensor(value_set set, reduce_op op, dtype type, std::int64_t count, int r,
                    const device_spec& device) {
  auto t = tensor::zeros(type, {count}, device);
  visit_dtype(type, [&]<class T>(T) {
    auto elements = t.data<T>();
    for (std::int64_t i = 0; i < count; ++i) {
      const double v = value_of(set, op, type, i, r);
      if constexpr (is_half_v<T>)
        elements[static_cast<std::size_t>(i)] = T(static_cast<float>(v));
      else
        elements[static_cast<std::size_t>(i)] = static_cast<T>(v);
    }
  });
  return t;
}

std::vector<tensor> inputs_on(value_set set, reduce_op op, dtype type, std::int64_t count,
                              const std::vector<device_spec>& devices) {
  std::vector<tensor> xs;
  for (std::size_t r = 0; r < devices.size(); ++r)
    xs.push_back(input_tensor(set, op, type, count, static_cast<int>(r), devices[r]));
  return xs;
}

std::vector<tensor> copies_of(const std::vector<tensor>& xs) {
  std::vector<tensor> out;
  for (const auto& x : xs)
    out.push_back(x.copy());
  return out;
}

std::vector<device_spec> gpu_named(int n) {
  std::vector<device_spec> devices;
  for (int d = 0; d < n; ++d)
    devices.push_back(device_spec{"/gpu:" + std::to_string(d)}.canonical());
  return devices;
}

bool same_bytes(const tensor& a, const tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape()
         && (a.byte_size() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// reduction_to_one_device's result for `xs` (on distinct devices), on
/// the first input's device.
tensor reference(reduce_op op, const std::vector<tensor>& xs) {
  return reduction_to_one_device{}
    .reduce(op, per_replica<tensor>{xs}, xs.front().device())
    .primary();
}

// -- a host kind with several memory domains ----------------------------------------
//
// The host kind's memory and kernels under another kind whose domain is
// the device index / 2, so DOMAINMEM:0 and :1 share a memory, :2 and :3
// another...: on_device_all_reduce's path for replicas on several
// physical GPUs, and reduce_buffers' check of domains, without a GPU.

int domain_of_pairs(const device_spec& device) {
  return device.device_index().value_or(0) / 2;
}

void host_to_host(const device_spec&, void* destination, const device_spec&, const void* source,
                  std::size_t bytes) {
  if (bytes != 0)
    std::memcpy(destination, source, bytes);
}

const device_kind& domains_kind() {
  static const device_kind kind = [] {
    device_kind k = detail::host_kind();
    k.name = "domains";
    k.domain = domain_of_pairs;
    return k;
  }();
  return kind;
}

/// Registers the kind for DOMAINMEM devices while it lives.
struct domains_registration {
  domains_registration() {
    detail::register_device_kind("DOMAINMEM", domains_kind());
    detail::register_copy(detail::host_kind(), domains_kind(), host_to_host);
    detail::register_copy(domains_kind(), detail::host_kind(), host_to_host);
    detail::register_copy(domains_kind(), domains_kind(), host_to_host);
  }
  ~domains_registration() { detail::unregister_device_kind("DOMAINMEM"); }
  domains_registration(const domains_registration&) = delete;
  domains_registration& operator=(const domains_registration&) = delete;
};

std::vector<device_spec> domain_devices(int n) {
  std::vector<device_spec> devices;
  for (int d = 0; d < n; ++d)
    devices.push_back(device_spec{"/device:DOMAINMEM:" + std::to_string(d)}.canonical());
  return devices;
}

} // namespace

// -- detail::reduce_buffers ---------------------------------------------------------

TEST_CASE("reduce_buffers on host memory equals reduction_to_one_device bit for bit") {
  for (auto set : {value_set::exact, value_set::rounding})
    for (auto type : all_dtypes)
      for (auto op : all_ops)
        for (int n : input_counts)
          for (auto count : element_counts) {
            INFO(name_of(set), " values, ", name_of(type), ", ", to_string(op), ", ", n,
                 " inputs, ", count, " elements");
            const auto inputs = inputs_on(set, op, type, count, cpu_devices(n));
            const auto originals = copies_of(inputs);
            const auto expected = reference(op, inputs);
            // Outputs on other devices than the inputs, and one output only.
            std::vector<tensor> outputs;
            for (int d = 0; d < 3; ++d)
              outputs.push_back(tensor::uninitialized(type, {count}, cpu_device(d + 7)));
            detail::reduce_buffers(op, inputs, outputs);
            for (const auto& out : outputs)
              CHECK(same_bytes(out, expected));
            auto single = tensor::uninitialized(type, {count}, cpu_device(0));
            detail::reduce_buffers(op, inputs, std::span<tensor>{&single, 1});
            CHECK(same_bytes(single, expected));
            // The inputs are read only.
            for (std::size_t r = 0; r < inputs.size(); ++r)
              CHECK(same_bytes(inputs[r], originals[r]));
            if (set == value_set::exact)
              check_elements(expected, op, type, count, n);
          }
}

TEST_CASE("reduce_buffers writes outputs that are its inputs after reading them") {
  for (auto type : all_dtypes)
    for (auto op : all_ops)
      for (int n : input_counts)
        for (auto count : element_counts) {
          INFO(name_of(type), ", ", to_string(op), ", ", n, " inputs, ", count, " elements");
          const auto originals = inputs_on(value_set::rounding, op, type, count, cpu_devices(n));
          const auto expected = reference(op, originals);

          // Every input is an output.
          auto all = copies_of(originals);
          detail::reduce_buffers(op, all, all);
          for (const auto& x : all)
            CHECK(same_bytes(x, expected));

          // The first input alone, then the last one and a fresh buffer.
          auto first = copies_of(originals);
          detail::reduce_buffers(op, first, std::span<tensor>{first.data(), 1});
          CHECK(same_bytes(first[0], expected));
          for (std::size_t r = 1; r < first.size(); ++r)
            CHECK(same_bytes(first[r], originals[r]));

          auto last = copies_of(originals);
          std::vector<tensor> outputs{last.back(), tensor::uninitialized(type, {count})};
          detail::reduce_buffers(op, last, outputs);
          CHECK(same_bytes(last.back(), expected));
          CHECK(same_bytes(outputs[1], expected));

          // One input given twice is two inputs.
          if (n == 1) {
            auto twice = copies_of(originals);
            const std::vector<tensor> doubled{twice[0], twice[0]};
            detail::reduce_buffers(op, doubled, twice);
            CHECK(same_bytes(twice[0],
                             reference(op, {originals[0], originals[0].to(cpu_device(1))})));
          }
        }
}

TEST_CASE("reduce_buffers with no outputs writes nothing") {
  const auto inputs = inputs_on(value_set::exact, reduce_op::sum, dtype::f32, 65, cpu_devices(3));
  const auto originals = copies_of(inputs);
  detail::reduce_buffers(reduce_op::sum, inputs, std::span<tensor>{});
  for (std::size_t r = 0; r < inputs.size(); ++r)
    CHECK(same_bytes(inputs[r], originals[r]));
}

TEST_CASE("reduce_buffers errors: no inputs, dtypes, shapes, kinds and memory domains") {
  auto out = tensor::zeros(dtype::f32, {3});
  std::vector<tensor> outputs{out};
  CHECK(contains(error_of<value_error>([&] {
                   detail::reduce_buffers(reduce_op::sum, std::span<const tensor>{}, outputs);
                 }),
                 "no inputs"));

  const std::vector<tensor> mixed_types{tensor::zeros(dtype::f32, {3}),
                                        tensor::zeros(dtype::f64, {3})};
  CHECK(contains(
    error_of<dtype_error>([&] { detail::reduce_buffers(reduce_op::sum, mixed_types, outputs); }),
    "float64"));
  const std::vector<tensor> mixed_shapes{tensor::zeros(dtype::f32, {3}),
                                         tensor::zeros(dtype::f32, {4})};
  CHECK(contains(
    error_of<shape_error>([&] { detail::reduce_buffers(reduce_op::sum, mixed_shapes, outputs); }),
    "[4]"));
  const std::vector<tensor> good{tensor::zeros(dtype::f32, {3}), tensor::zeros(dtype::f32, {3})};
  std::vector<tensor> wrong_type{tensor::zeros(dtype::i32, {3})};
  CHECK_THROWS_AS(detail::reduce_buffers(reduce_op::sum, good, wrong_type), dtype_error);
  std::vector<tensor> wrong_shape{tensor::zeros(dtype::f32, {1, 3})};
  CHECK_THROWS_AS(detail::reduce_buffers(reduce_op::sum, good, wrong_shape), shape_error);
  std::vector<tensor> scalar{tensor::scalar(0.0f)};
  CHECK_THROWS_AS(detail::reduce_buffers(reduce_op::sum, good, scalar), shape_error);
  // Nothing was written.
  CHECK(out == tensor::zeros(dtype::f32, {3}));

  domains_registration registration;
  const auto devices = domain_devices(3); // domains 0, 0, 1
  const std::vector<tensor> one_domain{tensor::zeros(dtype::f32, {3}, devices[0]),
                                       tensor::zeros(dtype::f32, {3}, devices[1])};
  std::vector<tensor> one_domain_out{tensor::zeros(dtype::f32, {3}, devices[1])};
  detail::reduce_buffers(reduce_op::sum, one_domain, one_domain_out); // fine
  const std::vector<tensor> two_domains{tensor::zeros(dtype::f32, {3}, devices[0]),
                                        tensor::zeros(dtype::f32, {3}, devices[2])};
  const auto message = error_of<device_error>(
    [&] { detail::reduce_buffers(reduce_op::sum, two_domains, one_domain_out); });
  CHECK(contains(message, "not in one memory of the domains kind"));
  CHECK(contains(message, "DOMAINMEM:2"));
  std::vector<tensor> other_domain_out{tensor::zeros(dtype::f32, {3}, devices[2])};
  CHECK_THROWS_AS(detail::reduce_buffers(reduce_op::sum, one_domain, other_domain_out),
                  device_error);
  // Host memory and the other kind's: different memory.
  const std::vector<tensor> two_kinds{tensor::zeros(dtype::f32, {3}),
                                      tensor::zeros(dtype::f32, {3}, devices[0])};
  CHECK(contains(
    error_of<device_error>([&] { detail::reduce_buffers(reduce_op::sum, two_kinds, outputs); }),
    "different memory"));
}

// -- detail::converted --------------------------------------------------------------

TEST_CASE("converted: float32 to float16 and bfloat16 as the host's conversions, and back") {
  const float denormal_f16 = 0x1p-24f;
  const std::vector<float> values{
    0.0f, -0.0f, 1.0f, -1.0f, 0.1f, 1.0f / 3.0f, 65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f,
    denormal_f16, 1.5f * denormal_f16, 2.5f * denormal_f16, 0x1p-14f, 0x1p-15f, 3.0e-41f,
    1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 2049.0f, 2051.0f,
    257.0f, 259.0f, 3.4e38f, std::numeric_limits<float>::infinity(),
    -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
    -123.456f, 7.0e-5f};
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, values.size(), std::size_t{65}}) {
    CAPTURE(count);
    std::vector<float> xs;
    for (std::size_t i = 0; i < count; ++i)
      xs.push_back(values[i % values.size()] * (i >= values.size() ? 1.5f : 1.0f));
    const auto source = tensor::from(xs, {static_cast<std::int64_t>(count)});

    const auto halves = detail::converted(source, dtype::f16);
    const auto brains = detail::converted(source, dtype::bf16);
    REQUIRE(halves.dtype() == dtype::f16);
    REQUIRE(brains.dtype() == dtype::bf16);
    CHECK(halves.shape() == source.shape());
    CHECK(halves.device() == source.device());
    for (std::size_t i = 0; i < count; ++i) {
      CAPTURE(xs[i]);
      CHECK(halves.data<float16_t>()[i].bits == float16_t(xs[i]).bits);
      CHECK(brains.data<bfloat16_t>()[i].bits == bfloat16_t(xs[i]).bits);
    }
    const auto wide_halves = detail::converted(halves, dtype::f32);
    const auto wide_brains = detail::converted(brains, dtype::f32);
    REQUIRE(wide_halves.dtype() == dtype::f32);
    for (std::size_t i = 0; i < count; ++i) {
      CHECK(std::bit_cast<std::uint32_t>(wide_halves.data<float>()[i])
            == std::bit_cast<std::uint32_t>(static_cast<float>(halves.data<float16_t>()[i])));
      CHECK(std::bit_cast<std::uint32_t>(wide_brains.data<float>()[i])
            == std::bit_cast<std::uint32_t>(static_cast<float>(brains.data<bfloat16_t>()[i])));
    }
    // Widening is exact: narrowing again gives the same bits.
    CHECK(same_bytes(detail::converted(wide_halves, dtype::f16), halves));
    CHECK(same_bytes(detail::converted(wide_brains, dtype::bf16), brains));
  }
}

TEST_CASE("converted: the same dtype is the tensor itself; other pairs are a dtype_error") {
  for (auto type : all_dtypes) {
    const auto x = tensor::zeros(type, {3});
    CHECK(detail::converted(x, type).same_buffer(x));
  }
  const std::vector<std::pair<dtype, dtype>> refused{
    {dtype::f64, dtype::f32}, {dtype::f32, dtype::f64}, {dtype::i32, dtype::f32},
    {dtype::f32, dtype::i32}, {dtype::i64, dtype::f16}, {dtype::f16, dtype::bf16},
    {dtype::bf16, dtype::f16}, {dtype::f16, dtype::f64}, {dtype::bf16, dtype::i64}};
  for (const auto& [from, to] : refused) {
    INFO(name_of(from), " to ", name_of(to));
    const auto message =
      error_of<dtype_error>([&] { detail::converted(tensor::zeros(from, {2}), to); });
    CHECK(contains(message, name_of(from)));
    CHECK(contains(message, name_of(to)));
  }
}

// -- on_device_all_reduce ------------------------------------------------------------

TEST_CASE("on_device_all_reduce on CPU devices equals reduction_to_one_device bit for bit") {
  on_device_all_reduce ops;
  CHECK(ops.name() == "on_device_all_reduce");
  for (auto set : {value_set::exact, value_set::rounding})
    for (auto type : all_dtypes)
      for (auto op : all_ops)
        for (int n : input_counts)
          for (auto count : element_counts) {
            INFO(name_of(set), " values, ", name_of(type), ", ", to_string(op), ", ", n,
                 " replicas, ", count, " elements");
            const per_replica<tensor> value{inputs_on(set, op, type, count, cpu_devices(n))};
            const auto originals = copies_of(value.values());
            const auto expected = reduction_to_one_device{}.reduce(op, value, value);
            const auto result = ops.reduce(op, value, value);
            REQUIRE(result.size() == static_cast<std::size_t>(n));
            for (std::size_t r = 0; r < result.size(); ++r) {
              CHECK(result[r].device() == cpu_device(static_cast<int>(r)).canonical());
              CHECK(same_bytes(result[r], expected[r]));
              if (n > 1) // one replica is TF's shortcut: the component itself
                for (const auto& x : value.values())
                  CHECK_FALSE(result[r].same_buffer(x));
            }
            for (std::size_t a = 0; a < result.size(); ++a)
              for (std::size_t b = a + 1; b < result.size(); ++b)
                CHECK_FALSE(result[a].same_buffer(result[b]));
            for (std::size_t r = 0; r < originals.size(); ++r)
              CHECK(same_bytes(value[r], originals[r]));
            if (set == value_set::exact)
              for (const auto& x : result.values())
                check_elements(x, op, type, count, n);
          }
}

TEST_CASE("on_device_all_reduce on GPU names in host memory (no CUDA device) reduces in one "
          "domain") {
  on_device_all_reduce ops;
  for (auto type : all_dtypes)
    for (auto op : all_ops)
      for (int n : {2, 3, 4}) {
        INFO(name_of(type), ", ", to_string(op), ", ", n, " replicas");
        const per_replica<tensor> value{inputs_on(value_set::rounding, op, type, 65, gpu_named(n))};
        const auto expected = reduction_to_one_device{}.reduce(op, value, value);
        const auto result = ops.reduce(op, value, value);
        REQUIRE(result.size() == static_cast<std::size_t>(n));
        for (std::size_t r = 0; r < result.size(); ++r) {
          CHECK(result[r].device() == gpu_named(n)[r]);
          CHECK(result[r].buffer().kind() == &detail::host_kind());
          CHECK(same_bytes(result[r], expected[r]));
        }
      }
}

TEST_CASE("on_device_all_reduce falls back to reduction_to_one_device unless components are one "
          "per destination") {
  on_device_all_reduce ops;
  for (auto type : all_dtypes)
    for (auto op : all_ops) {
      INFO(name_of(type), ", ", to_string(op));
      const per_replica<tensor> value{
        inputs_on(value_set::rounding, op, type, 65, cpu_devices(3))};
      // One destination elsewhere; destinations in another order; more
      // destinations than components; one destination twice.
      for (const auto& where : std::vector<std::vector<device_spec>>{
             {cpu_device(7)},
             {cpu_device(1), cpu_device(0), cpu_device(2)},
             {cpu_device(0), cpu_device(1), cpu_device(2), cpu_device(3)},
             {cpu_device(0), cpu_device(1)}}) {
        CAPTURE(where.size());
        std::vector<tensor> placed;
        for (const auto& d : where)
          placed.push_back(tensor::zeros(type, {65}, d));
        const destinations destination{mirrored<tensor>{placed}};
        const auto expected = reduction_to_one_device{}.reduce(op, value, destination);
        const auto result = ops.reduce(op, value, destination);
        REQUIRE(result.size() == where.size());
        for (std::size_t d = 0; d < where.size(); ++d) {
          CHECK(result[d].device() == where[d].canonical());
          CHECK(same_bytes(result[d], expected[d]));
        }
      }
      // A string destination.
      const auto one = ops.reduce(op, value, "/cpu:5");
      REQUIRE(one.size() == 1);
      CHECK(one[0].device() == cpu_device(5).canonical());
      CHECK(same_bytes(one[0], reduction_to_one_device{}.reduce(op, value, "/cpu:5")[0]));
    }
  // One component on its destination: TF's shortcut, the component itself.
  const per_replica<tensor> single{inputs_on(value_set::exact, reduce_op::sum, dtype::f32, 7,
                                             cpu_devices(1))};
  CHECK(ops.reduce(reduce_op::sum, single, single)[0].same_buffer(single[0]));
}

TEST_CASE("on_device_all_reduce across memory domains: per domain, then across, closed forms") {
  domains_registration registration;
  on_device_all_reduce ops;
  for (auto set : {value_set::exact, value_set::rounding})
    for (auto type : all_dtypes)
      for (auto op : all_ops)
        for (int n : {2, 3, 4, 7}) // domains {0, 0}, {0, 0, 1}, ... {0, 0, 1, 1, 2, 2, 3}
          for (auto count : element_counts) {
            INFO(name_of(set), " values, ", name_of(type), ", ", to_string(op), ", ", n,
                 " replicas, ", count, " elements");
            const per_replica<tensor> value{inputs_on(set, op, type, count, domain_devices(n))};
            const auto result = ops.reduce(op, value, value);
            REQUIRE(result.size() == static_cast<std::size_t>(n));
            const auto expected = reduction_to_one_device{}.reduce(op, value, value);
            for (std::size_t r = 0; r < result.size(); ++r) {
              CHECK(result[r].device() == domain_devices(n)[r]);
              CHECK(result[r].buffer().kind() == &domains_kind());
              for (const auto& x : value.values())
                CHECK_FALSE(result[r].same_buffer(x));
            }
            // Within one domain, and for MIN, MAX and integers, the grouping
            // does not show; floating SUM, MEAN and PROD of rounding values
            // associate differently, so those are checked on exact values.
            const bool grouping_shows = n > 2 && is_floating(type)
                                        && (op == reduce_op::sum || op == reduce_op::mean
                                            || op == reduce_op::prod);
            if (set == value_set::exact || !grouping_shows)
              for (std::size_t r = 0; r < result.size(); ++r)
                CHECK(same_bytes(result[r].to(cpu_device(0)), expected[r].to(cpu_device(0))));
            if (set == value_set::exact)
              for (const auto& x : result.values())
                check_elements(x, op, type, count, n);
            // All replicas agree.
            for (std::size_t r = 1; r < result.size(); ++r)
              CHECK(same_bytes(result[r], result[0]));
          }
}

// Components in one kind of memory, the destination in another: what
// strategy::reduce does with replicas on GPUs (it reduces to the current
// device, /cpu:0 by default). The simulated kind stands for CUDA memory:
// combine_into (collectives/reduce_kernels.hpp) brings an operand of
// another kind to the accumulator's device.
TEST_CASE("reducing components of another kind of memory to a host destination, and back") {
  domains_registration registration;
  for (auto type : all_dtypes)
    for (auto op : all_ops) {
      INFO(name_of(type), ", ", to_string(op));
      const per_replica<tensor> on_host{
        inputs_on(value_set::rounding, op, type, 65, cpu_devices(3))};
      const per_replica<tensor> elsewhere{
        inputs_on(value_set::rounding, op, type, 65, domain_devices(3))};
      const auto expected = reduction_to_one_device{}.reduce(op, on_host, "/cpu:0")[0];
      for (const std::shared_ptr<cross_device_ops>& ops :
           {std::shared_ptr<cross_device_ops>(std::make_shared<reduction_to_one_device>()),
            std::shared_ptr<cross_device_ops>(std::make_shared<on_device_all_reduce>())}) {
        INFO(ops->name());
        try {
          const auto to_host = ops->reduce(op, elsewhere, "/cpu:0");
          CHECK(to_host[0].device() == cpu_device(0).canonical());
          CHECK(same_bytes(to_host[0], expected));
          const auto from_host = ops->reduce(op, on_host, domain_devices(1)[0]);
          CHECK(from_host[0].buffer().kind() == &domains_kind());
          CHECK(same_bytes(from_host[0], expected));
        } catch (const device_error& e) {
          FAIL_CHECK("threw device_error: " << std::string{e.what()});
        }
      }
    }
}

// -- choose_the_best, nccl_all_reduce and gpu.hpp without a CUDA device ----------------
//
// tests/meson.build runs this suite with CUDA_VISIBLE_DEVICES empty, so on
// a GPU machine too the process sees no CUDA device.

TEST_CASE("without a CUDA device: no GPUs, GPU names are host memory") {
  CHECK(physical_gpu_count() == 0);
  CHECK(gpu_count() == 0);
  CHECK(detail::cuda_kind_if_present() == nullptr);
  CHECK(&detail::kind_of(device_spec{"/gpu:0"}) == &detail::host_kind());
  CHECK(contains(error_of<device_error>([] { gpu_devices(2); }),
                 LOCKSTEP_HAVE_CUDA ? "no CUDA device 0" : "without the CUDA backend"));
  CHECK_THROWS_AS(memory_stats(device_spec{"/gpu:0"}), device_error);
  CHECK_THROWS_AS(reset_peak_memory_stats(device_spec{"/gpu:0"}), device_error);
  CHECK_THROWS_AS(release_cached_memory(device_spec{"/gpu:0"}), device_error);
}

TEST_CASE("choose_the_best: CPUs get slice_all_reduce, GPUs in host memory "
          "reduction_to_one_device") {
  CHECK(choose_the_best(cpu_devices(4))->name() == "slice_all_reduce");
  CHECK(choose_the_best({})->name() == "slice_all_reduce");
  for (int n : input_counts)
    CHECK(choose_the_best(gpu_named(n))->name() == "reduction_to_one_device");
  CHECK(choose_the_best({"/cpu:0", "/gpu:0"})->name() == "reduction_to_one_device");
}

TEST_CASE("nccl_all_reduce refuses components in host memory") {
#if LOCKSTEP_HAVE_NCCL
  nccl_all_reduce ops;
  CHECK(ops.name() == "nccl_all_reduce");
  CHECK(nccl_all_reduce{{.timeout = std::chrono::milliseconds{200}}}.name() == "nccl_all_reduce");
  // A timeout that is not positive is refused; a huge one is capped.
  CHECK(contains(error_of<value_error>([] { nccl_all_reduce{{.timeout = {}}}; }),
                 "the timeout must be positive, got 0 ms"));
  CHECK(nccl_all_reduce{{.timeout = std::chrono::milliseconds::max()}}.name() == "nccl_all_reduce");
  for (const auto& devices : {gpu_named(2), gpu_named(3), cpu_devices(2)}) {
    const per_replica<tensor> value{
      inputs_on(value_set::exact, reduce_op::sum, dtype::f32, 7, devices)};
    const auto message = error_of<device_error>([&] { ops.reduce(reduce_op::sum, value, value); });
    CHECK(contains(message, "nccl_all_reduce: component 0 is in host memory of "
                              + devices[0].to_string()));
    CHECK(contains(message, "NCCL reduces CUDA memory"));
    CHECK(contains(message, "0 CUDA devices"));
    // batch_reduce, and a destination elsewhere, are refused alike.
    CHECK(contains(error_of<device_error>([&] {
                     ops.batch_reduce(reduce_op::mean, {{value, value}, {value, "/gpu:0"}});
                   }),
                   "NCCL reduces CUDA memory"));
  }
#else
  CHECK(contains(error_of<device_error>([] { nccl_all_reduce ops; }), "without NCCL"));
#endif
}

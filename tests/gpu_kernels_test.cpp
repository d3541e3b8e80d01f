// The CUDA kind's kernels against the host kind's, bit for bit (suite
// 'gpu', skipped without a device): every tensor kernel on every dtype,
// with the operand on the same logical GPU, on another logical GPU of the
// same physical GPU (streams joined by events) and, where there are two,
// on another physical GPU; reduce_buffers and converted. The values are
// NaN-free, of mixed sign and magnitude, with signed zeros, and their
// float16/bfloat16 results round (subnormals included). Physical GPU 0
// serves two logical GPUs here.

#include "lockstep/error.hpp"
#include "lockstep/gpu.hpp"
#include "lockstep/tensor.hpp"

#include "devices/device_registry.hpp"

#include "gpu_support.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

using namespace lockstep;
using namespace gpu_test;

namespace {

const std::vector<device_spec>& logical() {
  static const auto devices = gpu_devices(2, 0);
  return devices;
}

const device_spec host = cpu_device(0).canonical();

enum class kernel { add, subtract, multiply, min, max, axpy, scale, divide, copy };

struct kernel_case {
  kernel which;
  const char* name;
  double factor = 0;
  std::int64_t divisor = 1;
};

const kernel_case kernel_cases[] = {
  {kernel::add, "add_into"},
  {kernel::subtract, "subtract_into"},
  {kernel::multiply, "multiply_into"},
  {kernel::min, "min_into"},
  {kernel::max, "max_into"},
  {kernel::axpy, "axpy_into 0.3", 0.3},
  {kernel::axpy, "axpy_into -2.5", -2.5},
  {kernel::scale, "scale_into 1.7", 1.7},
  {kernel::scale, "scale_into -0.5", -0.5},
  {kernel::scale, "scale_into 0.001", 0.001},
  {kernel::divide, "divide_into 3", 0, 3},
  {kernel::divide, "divide_into 7", 0, 7},
  {kernel::divide, "divide_into -2", 0, -2},
  {kernel::copy, "copy_into"},
};

/// Runs the case's kernel: `accumulator op= x` (scale and divide ignore x).
void apply(const kernel_case& c, tensor& accumulator, const tensor& x) {
  switch (c.which) {
    case kernel::add:
      return add_into(accumulator, x);
    case kernel::subtract:
      return subtract_into(accumulator, x);
    case kernel::multiply:
      return multiply_into(accumulator, x);
    case kernel::min:
      return min_into(accumulator, x);
    case kernel::max:
      return max_into(accumulator, x);
    case kernel::axpy:
      return axpy_into(accumulator, c.factor, x);
    case kernel::scale:
      return scale_into(accumulator, c.factor);
    case kernel::divide:
      return divide_into(accumulator, c.divisor);
    case kernel::copy:
      return copy_into(accumulator, x);
  }
}

/// Where a kernel's operand lies relative to the accumulator on /gpu:0.
struct placement {
  const char* name;
  device_spec device;
};

std::vector<placement> placements() {
  std::vector<placement> out{{"same logical GPU", gpu(0)},
                             {"other logical GPU of the physical GPU", gpu(1)}};
  if (physical_gpu_count() >= 2)
    out.push_back({"another physical GPU", gpu(2)});
  return out;
}

} // namespace

TEST_CASE("every elementwise kernel on GPU tensors equals the host's bit for bit") {
  logical();
  for (auto type : all_dtypes)
    for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1037},
                               std::int64_t{600001}}) {
      const auto accumulator = values(type, {count}, 1);
      const auto operand = values(type, {count}, 2);
      for (const auto& c : kernel_cases) {
        auto expected = accumulator.copy();
        apply(c, expected, operand);
        for (const auto& p : placements()) {
          INFO(c.name, ", ", name_of(type), ", ", count, " elements, operand on ", p.name);
          auto on_gpu = accumulator.to(gpu(0));
          const auto x = operand.to(p.device);
          apply(c, on_gpu, x);
          CHECK(on_gpu.device() == gpu(0));
          CHECK(on_gpu.buffer().kind()->name == "cuda");
          CHECK(same_bytes(on_gpu, expected));
          CHECK(same_bytes(x, operand)); // the operand is read only
        }
        // The operand is the accumulator itself.
        INFO(c.name, ", ", name_of(type), ", ", count, " elements, operand aliasing");
        auto self_expected = accumulator.copy();
        apply(c, self_expected, self_expected);
        auto self = accumulator.to(gpu(1));
        apply(c, self, self);
        CHECK(same_bytes(self, self_expected));
      }
    }
}

TEST_CASE("kernels in a chain across two logical GPUs see each other's results") {
  logical();
  for (auto type : all_dtypes) {
    INFO(name_of(type));
    constexpr std::int64_t count = 300007;
    auto a = values(type, {count}, 11);
    auto b = values(type, {count}, 12);
    auto ga = a.to(gpu(0));
    auto gb = b.to(gpu(1));
    // b is changed on /gpu:1's stream, then read on /gpu:0's, then a is
    // read on /gpu:1's, then both are copied out.
    for (int round = 0; round < 3; ++round) {
      scale_into(b, 0.5);
      scale_into(gb, 0.5);
      add_into(a, b);
      add_into(ga, gb);
      subtract_into(b, a);
      subtract_into(gb, ga);
      max_into(a, b);
      max_into(ga, gb);
    }
    CHECK(same_bytes(ga, a));
    CHECK(same_bytes(gb, b));
  }
}

TEST_CASE("reduce_sum_axis on GPU tensors equals the host's bit for bit") {
  logical();
  const std::vector<std::pair<shape_t, std::size_t>> cases{
    {{7}, 0},          {{4099}, 0},       {{5, 7, 3}, 0},    {{5, 7, 3}, 1},
    {{5, 7, 3}, 2},    {{64, 129}, 0},    {{64, 129}, 1},    {{2, 1000, 3}, 1},
    {{3, 0}, 0},       {{3, 0}, 1},       {{2, 0, 3}, 1},    {{1, 1}, 1},
    {{600, 1001}, 1}};
  for (auto type : all_dtypes)
    for (const auto& [shape, axis] : cases) {
      INFO(name_of(type), ", shape ", shape_to_string(shape), ", axis ", axis);
      const auto x = values(type, shape, 21);
      const auto expected = reduce_sum_axis(x, axis);
      const auto on_gpu = x.to(gpu(1));
      const auto sums = reduce_sum_axis(on_gpu, axis);
      CHECK(sums.device() == gpu(1));
      CHECK(sums.buffer().kind()->name == "cuda");
      CHECK(same_bytes(sums, expected));
    }
}

TEST_CASE("GPU kernels check operands before they run") {
  logical();
  auto a = tensor::zeros(dtype::f32, {3}, gpu(0));
  CHECK(has(error_of<device_error>([&] { add_into(a, tensor::zeros(dtype::f32, {3}, host)); }),
            "different memory"));
  auto on_host = tensor::zeros(dtype::f32, {3}, host);
  CHECK_THROWS_AS(min_into(on_host, a), device_error);
  CHECK_THROWS_AS(add_into(a, tensor::zeros(dtype::f64, {3}, gpu(0))), dtype_error);
  CHECK_THROWS_AS(axpy_into(a, 2.0, tensor::zeros(dtype::f32, {4}, gpu(1))), shape_error);
  auto integers = tensor::zeros(dtype::i32, {3}, gpu(0));
  CHECK_THROWS_AS(divide_into(integers, 0), value_error);
  CHECK_THROWS_AS(reduce_sum_axis(a, 1), value_error);
  // Nothing was written.
  CHECK(same_bytes(a, tensor::zeros(dtype::f32, {3}, host)));
}

// -- the kernel table's convert and reduce_buffers ------------------------------------

TEST_CASE("converted on a GPU equals the host's conversions bit for bit") {
  logical();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> specials{0.0f, -0.0f, 1.0f, 0.1f, 65504.0f, 65519.0f, 65520.0f, 1e6f,
                              0x1p-24f, 1.5f * 0x1p-24f, 2.5f * 0x1p-24f, 0x1p-14f, 3.0e-41f,
                              1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f,
                              1.0f + 3 * 0x1p-8f, 3.4e38f, inf, -inf, -123.456f};
  for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{21},
                             std::int64_t{100003}}) {
    INFO(count, " elements");
    auto xs = values(dtype::f32, {count}, 31);
    auto elements = xs.data<float>();
    for (std::size_t i = 0; i < elements.size() && i < specials.size(); ++i)
      elements[i] = specials[i];
    const auto on_gpu = xs.to(gpu(0));
    for (auto half : {dtype::f16, dtype::bf16}) {
      INFO(name_of(half));
      const auto narrow = detail::converted(on_gpu, half);
      CHECK(narrow.device() == gpu(0));
      CHECK(narrow.buffer().kind()->name == "cuda");
      const auto expected = detail::converted(xs, half);
      CHECK(same_bytes(narrow, expected));
      const auto wide = detail::converted(narrow, dtype::f32);
      CHECK(same_bytes(wide, detail::converted(expected, dtype::f32)));
    }
  }
  CHECK(detail::converted(tensor::zeros(dtype::f32, {2}, gpu(0)), dtype::f32)
          .buffer()
          .kind()
          ->name
        == "cuda");
  CHECK_THROWS_AS(detail::converted(tensor::zeros(dtype::f64, {2}, gpu(0)), dtype::f32),
                  dtype_error);
}

TEST_CASE("reduce_buffers on a GPU equals the host's bit for bit; outputs may be inputs") {
  logical();
  for (auto type : all_dtypes)
    for (auto op : all_ops)
      for (int n : {1, 2, 3, 8})
        for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7},
                                   std::int64_t{4099}}) {
          INFO(name_of(type), ", ", to_string(op), ", ", n, " inputs, ", count, " elements");
          const auto p = op == reduce_op::prod ? purpose::product : purpose::general;
          std::vector<tensor> host_inputs;
          std::vector<tensor> gpu_inputs;
          for (int r = 0; r < n; ++r) {
            host_inputs.push_back(values(type, {count}, 40 + static_cast<std::uint64_t>(r), p));
            gpu_inputs.push_back(host_inputs.back().to(gpu(r % 2)));
          }
          auto expected = tensor::uninitialized(type, {count}, host);
          detail::reduce_buffers(op, host_inputs, std::span<tensor>{&expected, 1});

          // Fresh outputs on both logical GPUs.
          std::vector<tensor> outputs;
          for (int r = 0; r < n; ++r)
            outputs.push_back(tensor::uninitialized(type, {count}, gpu((r + 1) % 2)));
          detail::reduce_buffers(op, gpu_inputs, outputs);
          for (const auto& out : outputs)
            CHECK(same_bytes(out, expected));
          for (int r = 0; r < n; ++r) // the inputs are read only
            CHECK(same_bytes(gpu_inputs[static_cast<std::size_t>(r)],
                             host_inputs[static_cast<std::size_t>(r)]));

          // Every input an output, then the first alone.
          detail::reduce_buffers(op, gpu_inputs, gpu_inputs);
          for (const auto& x : gpu_inputs)
            CHECK(same_bytes(x, expected));
          std::vector<tensor> again;
          for (const auto& x : host_inputs)
            again.push_back(x.to(gpu(1)));
          detail::reduce_buffers(op, again, std::span<tensor>{again.data(), 1});
          CHECK(same_bytes(again[0], expected));
          for (std::size_t r = 1; r < again.size(); ++r)
            CHECK(same_bytes(again[r], host_inputs[r]));
        }
}

TEST_CASE("reduce_buffers on a GPU: 64 buffers at most, one physical GPU") {
  logical();
  std::vector<tensor> host_inputs;
  std::vector<tensor> gpu_inputs;
  for (int r = 0; r < 65; ++r) {
    host_inputs.push_back(values(dtype::f32, {7}, 60 + static_cast<std::uint64_t>(r)));
    gpu_inputs.push_back(host_inputs.back().to(gpu(r % 2)));
  }
  auto expected = tensor::uninitialized(dtype::f32, {7}, host);
  const std::span<const tensor> first_64{host_inputs.data(), 64};
  detail::reduce_buffers(reduce_op::sum, first_64, std::span<tensor>{&expected, 1});
  auto out = tensor::uninitialized(dtype::f32, {7}, gpu(0));
  detail::reduce_buffers(reduce_op::sum, std::span<const tensor>{gpu_inputs.data(), 64},
                         std::span<tensor>{&out, 1});
  CHECK(same_bytes(out, expected));
  CHECK(has(error_of<value_error>([&] {
              detail::reduce_buffers(reduce_op::sum, gpu_inputs, std::span<tensor>{&out, 1});
            }),
            "at most 64"));
  // Host and CUDA memory: different kinds.
  const std::vector<tensor> mixed{gpu_inputs[0], host_inputs[1]};
  CHECK_THROWS_AS(detail::reduce_buffers(reduce_op::sum, mixed, std::span<tensor>{&out, 1}),
                  device_error);
  if (physical_gpu_count() >= 2) {
    const std::vector<tensor> two_gpus{gpu_inputs[0], host_inputs[1].to(gpu(2))};
    CHECK(has(error_of<device_error>([&] {
                detail::reduce_buffers(reduce_op::sum, two_gpus, std::span<tensor>{&out, 1});
              }),
              "not in one memory of the cuda kind"));
  }
}

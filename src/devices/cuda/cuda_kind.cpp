// The CUDA device kind: memory of a logical GPU from its caching pool, its
// work on its stream (cuda_places.hpp), copies through pinned staging
// (cuda_copies.hpp) and the kernels of cuda_kernels.cu. It serves GPU
// devices when the process sees a CUDA device; the per-device executor
// thread is the host kind's, which launches variable writes on the
// device's stream.

#include "devices/cuda/cuda_check.hpp"
#include "devices/cuda/cuda_copies.hpp"
#include "devices/cuda/cuda_kernels.hpp"
#include "devices/cuda/cuda_places.hpp"
#include "devices/device_executor.hpp"
#include "devices/device_registry.hpp"

#include "lockstep/error.hpp"

#include <algorithm>
#include <functional>
#include <mutex>
#include <numeric>
#include <vector>

namespace lockstep::detail {

namespace {

static_assert(static_cast<int>(cuda::element::bf16) == static_cast<int>(dtype::bf16)
              && static_cast<int>(cuda::element::i64) == static_cast<int>(dtype::i64));
static_assert(static_cast<int>(cuda::reduction::prod) == static_cast<int>(reduce_op::prod)
              && static_cast<int>(cuda::reduction::mean) == static_cast<int>(reduce_op::mean));

cuda::element element_of(const tensor& t) {
  return static_cast<cuda::element>(t.dtype());
}

void* data_of(const tensor& t) {
  return t.buffer().data();
}

// -- memory --------------------------------------------------------------------

void* cuda_allocate(const device_spec& device, std::size_t bytes) {
  return place_of(device).pool->allocate(bytes);
}

void cuda_free(void* memory, std::size_t) noexcept {
  if (auto* place = place_holding(memory))
    place->pool->free(memory);
}

void cuda_zero(const device_spec& device, void* memory, std::size_t bytes) {
  if (bytes == 0)
    return;
  auto& place = place_of(device);
  cuda_device_guard guard{place.physical};
  LOCKSTEP_CUDA_CHECK(cudaMemsetAsync(memory, 0, bytes, place.stream));
}

int cuda_domain(const device_spec& device) {
  return place_of(device).physical;
}

// -- kernels -------------------------------------------------------------------

/// Runs `launch(place, operand)` on the accumulator's stream with `x`
/// readable there: `x` itself when it lies on the same physical GPU (its
/// stream joined in before, and joined back after, so neither side reuses
/// the buffer early), else a copy of it on the accumulator's GPU.
template <class Launch>
void with_operand(const tensor& accumulator, const tensor& x, Launch launch) {
  auto& target = place_of(accumulator.device());
  auto& source = place_of(x.device());
  cuda_device_guard guard{target.physical};
  if (&source == &target) {
    launch(target, x);
  } else if (source.physical != target.physical) {
    launch(target, x.to(accumulator.device()));
  } else {
    join_streams(source, target);
    launch(target, x);
    join_streams(target, source);
  }
}

template <cuda::combine Op>
void binary_kernel(tensor& accumulator, const tensor& x) {
  with_operand(accumulator, x, [&](cuda_place& place, const tensor& operand) {
    cuda::binary(Op, element_of(accumulator), data_of(accumulator), data_of(operand),
                 accumulator.num_elements(), place.stream);
  });
}

void copy_kernel(tensor& destination, const tensor& source) {
  if (!destination.same_buffer(source))
    copy_cuda_to_cuda(destination.device(), data_of(destination), source.device(),
                      data_of(source), source.byte_size());
}

void axpy_kernel(tensor& y, double factor, const tensor& x) {
  with_operand(y, x, [&](cuda_place& place, const tensor& operand) {
    cuda::axpy(element_of(y), data_of(y), factor, data_of(operand), y.num_elements(),
               place.stream);
  });
}

void scale_kernel(tensor& x, double factor) {
  auto& place = place_of(x.device());
  cuda_device_guard guard{place.physical};
  cuda::scale(element_of(x), data_of(x), factor, x.num_elements(), place.stream);
}

void divide_kernel(tensor& x, std::int64_t divisor) {
  auto& place = place_of(x.device());
  cuda_device_guard guard{place.physical};
  cuda::divide(element_of(x), data_of(x), divisor, x.num_elements(), place.stream);
}

tensor reduce_sum_axis_kernel(const tensor& x, std::size_t axis) {
  const auto& shape = x.shape();
  const auto at = shape.begin() + static_cast<std::ptrdiff_t>(axis);
  const auto product = [](auto first, auto last) {
    return std::accumulate(first, last, std::int64_t{1}, std::multiplies<>{});
  };
  shape_t result_shape = shape;
  result_shape.erase(result_shape.begin() + static_cast<std::ptrdiff_t>(axis));
  auto result = tensor::uninitialized(x.dtype(), std::move(result_shape), x.device());
  auto& place = place_of(x.device());
  cuda_device_guard guard{place.physical};
  cuda::reduce_sum_axis(element_of(x), data_of(x), data_of(result), product(shape.begin(), at),
                        *at, product(at + 1, shape.end()), place.stream);
  return result;
}

void convert_kernel(tensor& destination, const tensor& source) {
  with_operand(destination, source, [&](cuda_place& place, const tensor& operand) {
    cuda::convert(element_of(destination), data_of(destination), element_of(operand),
                  data_of(operand), operand.num_elements(), place.stream);
  });
}

void reduce_buffers_kernel(reduce_op op, std::span<const tensor> inputs,
                           std::span<tensor> outputs) {
  if (inputs.size() > cuda::max_buffers || outputs.size() > cuda::max_buffers)
    throw value_error("reduce_buffers: " + std::to_string(inputs.size()) + " inputs and "
                      + std::to_string(outputs.size()) + " outputs; the CUDA kernel takes at most "
                      + std::to_string(cuda::max_buffers) + " of each");
  if (outputs.empty())
    return;
  // The kernel runs on the first output's stream, after the work so far of
  // every other buffer's stream; theirs wait for it before they go on.
  auto& target = place_of(outputs.front().device());
  std::vector<cuda_place*> others;
  std::vector<const void*> in;
  std::vector<void*> out;
  const auto note = [&](const tensor& t) {
    auto* place = &place_of(t.device());
    if (place != &target && std::find(others.begin(), others.end(), place) == others.end())
      others.push_back(place);
  };
  for (const auto& t : inputs) {
    note(t);
    in.push_back(data_of(t));
  }
  for (const auto& t : outputs) {
    note(t);
    out.push_back(data_of(t));
  }
  for (auto* place : others)
    join_streams(*place, target);
  {
    cuda_device_guard guard{target.physical};
    cuda::reduce_buffers(static_cast<cuda::reduction>(op), element_of(inputs.front()), in.data(),
                         in.size(), out.data(), out.size(), inputs.front().num_elements(),
                         target.stream);
  }
  for (auto* place : others)
    join_streams(target, *place);
}

constexpr device_kind cuda_memory{
  .name = "cuda",
  .host_accessible = false,
  .allocate = cuda_allocate,
  .free = cuda_free,
  .zero = cuda_zero,
  .executor = &device_executor::of,
  .domain = cuda_domain,
  .kernels = {.add = binary_kernel<cuda::combine::add>,
              .subtract = binary_kernel<cuda::combine::subtract>,
              .multiply = binary_kernel<cuda::combine::multiply>,
              .min = binary_kernel<cuda::combine::min>,
              .max = binary_kernel<cuda::combine::max>,
              .copy = copy_kernel,
              .axpy = axpy_kernel,
              .scale = scale_kernel,
              .divide = divide_kernel,
              .reduce_sum_axis = reduce_sum_axis_kernel,
              .convert = convert_kernel,
              .reduce_buffers = reduce_buffers_kernel},
};

} // namespace

const device_kind* cuda_kind_if_present() {
  if (physical_cuda_devices() == 0)
    return nullptr;
  static std::once_flag registered;
  std::call_once(registered, [] {
    register_copy(host_kind(), cuda_memory, copy_host_to_cuda);
    register_copy(cuda_memory, host_kind(), copy_cuda_to_host);
    register_copy(cuda_memory, cuda_memory, copy_cuda_to_cuda);
  });
  return &cuda_memory;
}

} // namespace lockstep::detail

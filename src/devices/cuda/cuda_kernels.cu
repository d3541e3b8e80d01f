// The CUDA kind's kernels (cuda_kernels.hpp states what each computes).
// Elementwise kernels are grid-stride loops, one element per step; the
// reduction of K buffers, which the all-reduce of K replicas on one GPU
// spends its time in, moves 16 bytes per load and store, so it reads and
// writes memory at close to the copy engine's rate.

#include "devices/cuda/cuda_kernels.hpp"

#include "devices/cuda/cuda_check.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>

namespace lockstep::detail::cuda {

namespace {

constexpr int threads_per_block = 256;

// -- arithmetic as the host kernels do it --------------------------------------

/// How a stored element is computed with: itself, or float for half types.
template <class T>
struct arith {
  using compute = T;
  static __device__ compute load(T x) { return x; }
  static __device__ T store(compute x) { return x; }
};

template <>
struct arith<__half> {
  using compute = float;
  static __device__ float load(__half x) { return __half2float(x); }
  static __device__ __half store(float x) { return __float2half_rn(x); }
};

template <>
struct arith<__nv_bfloat16> {
  using compute = float;
  static __device__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __nv_bfloat16 store(float x) { return __float2bfloat16_rn(x); }
};

template <class T>
constexpr bool is_integral_element = std::is_same_v<T, int> || std::is_same_v<T, long long>;

template <combine Op, class C>
__device__ C combined(C accumulator, C x) {
  if constexpr (Op == combine::add)
    return accumulator + x;
  else if constexpr (Op == combine::subtract)
    return accumulator - x;
  else if constexpr (Op == combine::multiply)
    return accumulator * x;
  else if constexpr (Op == combine::min)
    return x < accumulator ? x : accumulator;
  else
    return accumulator < x ? x : accumulator;
}

/// x * factor as the host's scale_loop: floating types multiply by the
/// factor cast to their compute type; integers go through double.
template <class T>
__device__ typename arith<T>::compute scaled(typename arith<T>::compute x, double factor) {
  using C = typename arith<T>::compute;
  if constexpr (is_integral_element<T>)
    return static_cast<C>(static_cast<double>(x) * factor);
  else
    return x * static_cast<C>(factor);
}

/// x / divisor as the host's divide_loop.
template <class T>
__device__ typename arith<T>::compute divided(typename arith<T>::compute x,
                                              long long divisor) {
  using C = typename arith<T>::compute;
  if constexpr (is_integral_element<T>)
    return static_cast<C>(static_cast<long long>(x) / divisor);
  else
    return x / static_cast<C>(divisor);
}

// -- kernels --------------------------------------------------------------------

__device__ long long first_index() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ long long grid_stride() {
  return static_cast<long long>(gridDim.x) * blockDim.x;
}

template <class T, combine Op>
__global__ void binary_kernel(T* accumulator, const T* x, long long count) {
  using A = arith<T>;
  for (auto i = first_index(); i < count; i += grid_stride())
    accumulator[i] = A::store(combined<Op>(A::load(accumulator[i]), A::load(x[i])));
}

template <class T>
__global__ void axpy_kernel(T* y, double factor, const T* x, long long count) {
  using A = arith<T>;
  using C = typename A::compute;
  for (auto i = first_index(); i < count; i += grid_stride()) {
    if constexpr (is_integral_element<T>)
      y[i] = static_cast<T>(static_cast<double>(y[i]) + factor * static_cast<double>(x[i]));
    else
      y[i] = A::store(A::load(y[i]) + static_cast<C>(factor) * A::load(x[i]));
  }
}

template <class T>
__global__ void scale_kernel(T* x, double factor, long long count) {
  using A = arith<T>;
  for (auto i = first_index(); i < count; i += grid_stride())
    x[i] = A::store(scaled<T>(A::load(x[i]), factor));
}

template <class T>
__global__ void divide_kernel(T* x, long long divisor, long long count) {
  using A = arith<T>;
  for (auto i = first_index(); i < count; i += grid_stride())
    x[i] = A::store(divided<T>(A::load(x[i]), divisor));
}

template <class T>
__global__ void reduce_sum_axis_kernel(const T* x, T* result, long long outer, long long extent,
                                       long long inner) {
  using A = arith<T>;
  const long long count = outer * inner;
  for (auto i = first_index(); i < count; i += grid_stride()) {
    const long long o = i / inner;
    const long long j = i % inner;
    typename A::compute sum{};
    for (long long k = 0; k < extent; ++k)
      sum = sum + A::load(x[(o * extent + k) * inner + j]);
    result[i] = A::store(sum);
  }
}

template <class To, class From>
__global__ void convert_kernel(To* out, const From* in, long long count) {
  for (auto i = first_index(); i < count; i += grid_stride())
    out[i] = arith<To>::store(arith<From>::load(in[i]));
}

/// The buffers of one reduce_buffers launch, passed by value.
struct buffer_table {
  const void* inputs[max_buffers];
  void* outputs[max_buffers];
  int n_inputs;
  int n_outputs;
};

template <class T, int Width>
struct alignas(sizeof(T) * Width) element_pack {
  T values[Width];
};

template <reduction Op, class C>
__device__ C reduced(C accumulator, C x) {
  if constexpr (Op == reduction::sum || Op == reduction::mean)
    return combined<combine::add>(accumulator, x);
  else if constexpr (Op == reduction::prod)
    return combined<combine::multiply>(accumulator, x);
  else if constexpr (Op == reduction::min)
    return combined<combine::min>(accumulator, x);
  else
    return combined<combine::max>(accumulator, x);
}

/// Reduces element `i` (Width of them from a 16-byte pack, or one) of
/// every input, in input order, and writes it to every output.
template <class T, reduction Op, int Width>
__device__ void reduce_at(const buffer_table& table, long long i) {
  using A = arith<T>;
  using C = typename A::compute;
  using pack = element_pack<T, Width>;
  C totals[Width];
  {
    const pack first = *reinterpret_cast<const pack*>(static_cast<const T*>(table.inputs[0]) + i);
#pragma unroll
    for (int j = 0; j < Width; ++j)
      totals[j] = A::load(first.values[j]);
  }
  for (int r = 1; r < table.n_inputs; ++r) {
    const pack next = *reinterpret_cast<const pack*>(static_cast<const T*>(table.inputs[r]) + i);
#pragma unroll
    for (int j = 0; j < Width; ++j)
      totals[j] = reduced<Op>(totals[j], A::load(next.values[j]));
  }
  pack result;
#pragma unroll
  for (int j = 0; j < Width; ++j) {
    if constexpr (Op == reduction::mean)
      totals[j] = divided<T>(totals[j], table.n_inputs);
    result.values[j] = A::store(totals[j]);
  }
  for (int o = 0; o < table.n_outputs; ++o)
    *reinterpret_cast<pack*>(static_cast<T*>(table.outputs[o]) + i) = result;
}

template <class T, reduction Op>
__global__ void reduce_buffers_kernel(buffer_table table, long long count, bool aligned) {
  constexpr int width = 16 / sizeof(T);
  const long long packed = aligned ? count / width * width : 0;
  for (auto p = first_index() * width; p < packed; p += grid_stride() * width)
    reduce_at<T, Op, width>(table, p);
  for (auto i = packed + first_index(); i < count; i += grid_stride())
    reduce_at<T, Op, 1>(table, i);
}

// -- launching ------------------------------------------------------------------

/// Blocks for `work` items: one wave that fills the device (2048 threads
/// per multiprocessor on Ampere and Hopper), no more than the work needs.
unsigned blocks_for(long long work) {
  // Runs right before each launch: clears a stale error of a call whose
  // result was ignored, so check_launch judges the launch alone (a sticky
  // error comes back from the launch itself).
  (void) cudaGetLastError();
  constexpr int cached_devices = 64;
  constexpr long long blocks_per_multiprocessor = 2048 / threads_per_block;
  static std::atomic<int> multiprocessors[cached_devices] = {};
  int device = 0;
  LOCKSTEP_CUDA_CHECK(cudaGetDevice(&device));
  int count = device < cached_devices ? multiprocessors[device].load() : 0;
  if (count == 0) {
    LOCKSTEP_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    if (device < cached_devices)
      multiprocessors[device] = count;
  }
  const long long needed = (work + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(
    std::clamp<long long>(needed, 1, blocks_per_multiprocessor * count));
}

void check_launch(const char* kernel) {
  const auto code = cudaGetLastError();
  if (code != cudaSuccess)
    throw_cuda_error(code, kernel, __FILE__, __LINE__);
}

/// Calls `f(T{})` with the storage type of `type`.
template <class F>
void visit(element type, F f) {
  switch (type) {
    case element::f32:
      return f(float{});
    case element::f64:
      return f(double{});
    case element::i32:
      return f(int{});
    case element::i64:
      return f(static_cast<long long>(0));
    case element::f16:
      return f(__half{});
    case element::bf16:
      return f(__nv_bfloat16{});
  }
}

template <class T, combine Op>
void launch_binary(void* accumulator, const void* x, long long count, cudaStream_t stream) {
  binary_kernel<T, Op><<<blocks_for(count), threads_per_block, 0, stream>>>(
    static_cast<T*>(accumulator), static_cast<const T*>(x), count);
}

template <class T, reduction Op>
void launch_reduce(const buffer_table& table, long long count, bool aligned,
                   cudaStream_t stream) {
  const long long work = aligned ? count / (16 / sizeof(T)) + count % (16 / sizeof(T)) : count;
  reduce_buffers_kernel<T, Op><<<blocks_for(work), threads_per_block, 0, stream>>>(
    table, count, aligned);
}

} // namespace

void binary(combine op, element type, void* accumulator, const void* x, std::int64_t count,
            cudaStream_t stream) {
  if (count == 0)
    return;
  visit(type, [&]<class T>(T) {
    switch (op) {
      case combine::add:
        return launch_binary<T, combine::add>(accumulator, x, count, stream);
      case combine::subtract:
        return launch_binary<T, combine::subtract>(accumulator, x, count, stream);
      case combine::multiply:
        return launch_binary<T, combine::multiply>(accumulator, x, count, stream);
      case combine::min:
        return launch_binary<T, combine::min>(accumulator, x, count, stream);
      case combine::max:
        return launch_binary<T, combine::max>(accumulator, x, count, stream);
    }
  });
  check_launch("binary_kernel<<<...>>>");
}

void axpy(element type, void* y, double factor, const void* x, std::int64_t count,
          cudaStream_t stream) {
  if (count == 0)
    return;
  visit(type, [&]<class T>(T) {
    axpy_kernel<T><<<blocks_for(count), threads_per_block, 0, stream>>>(
      static_cast<T*>(y), factor, static_cast<const T*>(x), count);
  });
  check_launch("axpy_kernel<<<...>>>");
}

void scale(element type, void* x, double factor, std::int64_t count, cudaStream_t stream) {
  if (count == 0)
    return;
  visit(type, [&]<class T>(T) {
    scale_kernel<T><<<blocks_for(count), threads_per_block, 0, stream>>>(static_cast<T*>(x),
                                                                        factor, count);
  });
  check_launch("scale_kernel<<<...>>>");
}

void divide(element type, void* x, std::int64_t divisor, std::int64_t count,
            cudaStream_t stream) {
  if (count == 0)
    return;
  visit(type, [&]<class T>(T) {
    divide_kernel<T><<<blocks_for(count), threads_per_block, 0, stream>>>(static_cast<T*>(x),
                                                                         divisor, count);
  });
  check_launch("divide_kernel<<<...>>>");
}

void reduce_sum_axis(element type, const void* x, void* result, std::int64_t outer,
                     std::int64_t extent, std::int64_t inner, cudaStream_t stream) {
  const auto count = outer * inner;
  if (count == 0)
    return;
  visit(type, [&]<class T>(T) {
    reduce_sum_axis_kernel<T><<<blocks_for(count), threads_per_block, 0, stream>>>(
      static_cast<const T*>(x), static_cast<T*>(result), outer, extent, inner);
  });
  check_launch("reduce_sum_axis_kernel<<<...>>>");
}

void convert(element to, void* out, element from, const void* in, std::int64_t count,
             cudaStream_t stream) {
  if (count == 0)
    return;
  visit(to, [&]<class To>(To) {
    visit(from, [&]<class From>(From) {
      convert_kernel<To, From><<<blocks_for(count), threads_per_block, 0, stream>>>(
        static_cast<To*>(out), static_cast<const From*>(in), count);
    });
  });
  check_launch("convert_kernel<<<...>>>");
}

void reduce_buffers(reduction op, element type, const void* const* inputs, std::size_t n_inputs,
                    void* const* outputs, std::size_t n_outputs, std::int64_t count,
                    cudaStream_t stream) {
  if (count == 0 || n_outputs == 0)
    return;
  buffer_table table{};
  bool aligned = true;
  for (std::size_t r = 0; r < n_inputs; ++r) {
    table.inputs[r] = inputs[r];
    aligned = aligned && reinterpret_cast<std::uintptr_t>(inputs[r]) % 16 == 0;
  }
  for (std::size_t o = 0; o < n_outputs; ++o) {
    table.outputs[o] = outputs[o];
    aligned = aligned && reinterpret_cast<std::uintptr_t>(outputs[o]) % 16 == 0;
  }
  table.n_inputs = static_cast<int>(n_inputs);
  table.n_outputs = static_cast<int>(n_outputs);
  visit(type, [&]<class T>(T) {
    switch (op) {
      case reduction::sum:
        return launch_reduce<T, reduction::sum>(table, count, aligned, stream);
      case reduction::mean:
        return launch_reduce<T, reduction::mean>(table, count, aligned, stream);
      case reduction::min:
        return launch_reduce<T, reduction::min>(table, count, aligned, stream);
      case reduction::max:
        return launch_reduce<T, reduction::max>(table, count, aligned, stream);
      case reduction::prod:
        return launch_reduce<T, reduction::prod>(table, count, aligned, stream);
    }
  });
  check_launch("reduce_buffers_kernel<<<...>>>");
}

} // namespace lockstep::detail::cuda

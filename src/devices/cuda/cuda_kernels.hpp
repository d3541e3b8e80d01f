#pragma once

// The CUDA kind's kernels, launched on a given stream. This header is
// shared by cuda_kernels.cu (nvcc) and the C++ that calls it, so it uses
// its own plain enums instead of lockstep's headers. Every kernel computes
// as the host kernels do (src/devices/host/host_kernels.cpp,
// elementwise_loops.hpp), so results are bit-identical: float16 and
// bfloat16 in float with one rounding (to nearest even) per operation,
// integers scaled through double, no fused multiply-add (the .cu is built
// with -fmad=false). Launch failures throw device_error.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace lockstep::detail::cuda {

/// lockstep::dtype, in its order.
enum class element : std::uint8_t { f32, f64, i32, i64, f16, bf16 };

/// The elementwise combinations: reduce_op's SUM (add), PROD (multiply),
/// MIN and MAX, and subtract.
enum class combine : std::uint8_t { add, multiply, min, max, subtract };

/// `accumulator[i] = accumulator[i] op x[i]`, i < count (MIN/MAX keep the
/// accumulator unless x compares strictly less/greater).
void binary(combine op, element type, void* accumulator, const void* x, std::int64_t count,
            cudaStream_t stream);

/// `y[i] += factor * x[i]` (floating: factor cast to the type; half types
/// in float; integers through double).
void axpy(element type, void* y, double factor, const void* x, std::int64_t count,
          cudaStream_t stream);

/// `x[i] *= factor`, cast as axpy casts it.
void scale(element type, void* x, double factor, std::int64_t count, cudaStream_t stream);

/// `x[i] /= divisor` (integers truncate toward zero, in 64 bits).
void divide(element type, void* x, std::int64_t divisor, std::int64_t count,
            cudaStream_t stream);

/// `result[o][j] = sum over k of x[o][k][j]`, added in order of k from 0
/// (half types in float, rounded once).
void reduce_sum_axis(element type, const void* x, void* result, std::int64_t outer,
                     std::int64_t extent, std::int64_t inner, cudaStream_t stream);

/// `out[i] = to(in[i])` between float32 and float16/bfloat16 (widening is
/// exact, narrowing rounds to nearest even), or a copy for one type.
void convert(element to, void* out, element from, const void* in, std::int64_t count,
             cudaStream_t stream);

/// The most buffers `reduce_buffers` reads or writes in one launch.
inline constexpr std::size_t max_buffers = 64;

/// reduce_op, in its order.
enum class reduction : std::uint8_t { sum, mean, min, max, prod };

/// One pass over `count` elements of `n_inputs` buffers, combined in input
/// order (half types in float, MEAN divided by n_inputs, one rounding),
/// the result written to each of `n_outputs` buffers. Outputs may be
/// inputs. At most max_buffers of each; all on the stream's device.
void reduce_buffers(reduction op, element type, const void* const* inputs, std::size_t n_inputs,
                    void* const* outputs, std::size_t n_outputs, std::int64_t count,
                    cudaStream_t stream);

} // namespace lockstep::detail::cuda

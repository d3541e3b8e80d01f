#pragma once

// The host kind's tensor kernels (the entries of its kernel_table). The
// public kernels (tensor_kernels.cpp) have checked dtypes, shapes and kinds
// before they call these; `x` may share the accumulator's buffer.

#include "lockstep/reduce_op.hpp"
#include "lockstep/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace lockstep::detail::host {

void add(tensor& accumulator, const tensor& x);
void subtract(tensor& accumulator, const tensor& x);
void multiply(tensor& accumulator, const tensor& x);
void min(tensor& accumulator, const tensor& x);
void max(tensor& accumulator, const tensor& x);
void copy(tensor& destination, const tensor& source);
void axpy(tensor& y, double factor, const tensor& x);
void scale(tensor& x, double factor);
void divide(tensor& x, std::int64_t divisor);
tensor reduce_sum_axis(const tensor& x, std::size_t axis);
void convert(tensor& destination, const tensor& source);
void reduce_buffers(reduce_op op, std::span<const tensor> inputs, std::span<tensor> outputs);

} // namespace lockstep::detail::host

// Rotary position embedding in one CUDA kernel (forward and backward), for the fused path of model/rope.h.
// Plain CUDA: no LibTorch header, so nvcc compiles it in seconds; the caller passes raw pointers and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// y[n, h, :] = x[n, h, :] * cos[n, :] + rotate_half(x[n, h, :]) * sin_sign * sin[n, :], rotate_half(v) =
// [-v[D/2:], v[:D/2]] (transformers' layout), computed in F32 and rounded once. sin_sign = -1 is the backward
// (the transpose of the rotation) when cos and sin repeat their first half, as rotary tables do.
// x: [rows, heads, head_dim] with heads and head_dim contiguous and `x_row_stride` elements from one row to the next
// (heads * head_dim when contiguous; more when x is one slice of a fused q/k/v projection); y: [rows, heads,
// head_dim] contiguous; cos, sin: [rows, head_dim] contiguous; all of `dtype`. head_dim even.
// Throws std::runtime_error with the CUDA error string when the launch fails.
void rope(const void* x, int64_t x_row_stride, const void* cos, const void* sin, void* y, int64_t rows, int64_t heads,
          int64_t head_dim, float sin_sign, DType dtype, void* stream);

}  // namespace ft::kernels

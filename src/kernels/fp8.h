// FP8 (e4m3) row quantization and byte transposes on CUDA, for the FP8 frozen base (model/fp8_linear.h): what
// quant::quantize_fp8_rows computes, in one kernel and without a host sync, so that a scaled FP8 GEMM can read its
// operands right after.
// Plain CUDA: no LibTorch header; the caller passes raw pointers and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// x [rows, cols] (row-major, `dtype`) to e4m3 codes [rows, cols] and F32 scales [rows]:
//   v = x (or x * col_scale[col] in F32 when col_scale is not null),
//   scale = amax(|v| of the row) / 448 as ATen divides by a scalar on CUDA (times the F32 reciprocal of 448), in
//           `dtype` when col_scale is null (in F32, rounded once), else in F32; 1 for a row of zeros,
//   code = e4m3(clamp(v / scale, +-448)), an IEEE division, rounded to nearest even.
// Bit for bit quant::quantize_fp8_rows(x) (col_scale null) or quant::quantize_fp8_rows(x.float() * col_scale) on CUDA
// tensors.
void fp8_quantize_rows(const void* x, DType dtype, const float* col_scale, int64_t rows, int64_t cols, uint8_t* codes,
                       float* scale, void* stream);

// out [cols, rows] = in [rows, cols]^T, one byte per element; rows and cols multiples of 4.
void transpose_bytes(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out, void* stream);

}  // namespace ft::kernels

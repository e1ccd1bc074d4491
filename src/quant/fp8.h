// FP8 weights and activations with one scale per row, as torchao's float8 per-row quantization computes them
// (torchao 0.18: _choose_scale_float8 with a per-row block, then _quantize_affine_float8).
//
// The format. A 2-D tensor [rows, cols] becomes float8 e4m3 (finite, max 448) codes of the same shape and one F32
// scale per row: value ~= code * scale[row]. The scale is amax(|row|) / 448, divided in the tensor's own dtype and
// then widened to F32 (torchao divides the BF16 amax by 448 in BF16); the codes are tensor / scale in F32, clamped
// to +-448 and rounded to the nearest e4m3 value (ties to even). One departure: a row of zeros gets scale 1 and
// zero codes, where torchao divides 0 by 0 (NaN codes).
//
// Plain ATen ops, so CPU and CUDA tensors both work, each with ATen's own division by the scalar 448: a division on
// the CPU, a multiplication by its F32 reciprocal on CUDA, so the two devices' scales can differ in the last bit, as
// torchao's own do. kernels/fp8.h computes the CUDA bits in one pass.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace ft::quant {

// The largest finite float8 e4m3 (e4m3fn) value.
constexpr float kFp8E4m3Max = 448.0f;

struct Fp8Tensor {
  at::Tensor data;   // F8E4M3FN [rows, cols]
  at::Tensor scale;  // F32 [rows]

  int64_t rows() const { return data.size(0); }
  int64_t cols() const { return data.size(1); }
  // Bytes of the codes and scales (what the quantized tensor costs in memory).
  int64_t storage_bytes() const { return data.numel() + 4 * scale.numel(); }
};

// Quantizes `x` (F32, BF16 or F16, [rows, cols] with rows, cols > 0, any device) per row. The result lives on
// x's device. Throws ft::Error for anything else.
Fp8Tensor quantize_fp8_rows(const at::Tensor& x);

// codes * scale per row, in F32 with one rounding to `dtype` (F32, BF16 or F16): [rows, cols] on q's device.
at::Tensor dequantize_fp8_rows(const Fp8Tensor& q, at::ScalarType dtype);

// What a scaled FP8 GEMM computes, a [rows_a, rows_b] = (a codes . b codes^T) * a.scale[i] * b.scale[j], summed in
// F32 and rounded once to `dtype`: the reference of the CUDA path (torch._scaled_mm with row-wise scales) and the
// path of devices without FP8 GEMMs.
at::Tensor fp8_gemm_reference(const Fp8Tensor& a, const Fp8Tensor& b, at::ScalarType dtype);

}  // namespace ft::quant

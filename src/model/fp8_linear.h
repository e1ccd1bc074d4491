// The GEMM of a frozen FP8 weight (model.quantize: fp8, quant/fp8.h): e4m3 codes with one F32 scale per output row.
// Forward, y = x W^T: x is quantized per row (per token) on the fly and one scaled FP8 GEMM
// (at::_scaled_mm, row-wise scales, BF16 out) multiplies the codes. Backward, dx = dy W: W's row scales are folded
// into dy's columns (dy * scale[col]) before dy is quantized per row, so the GEMM over W's codes needs no scale of
// its own; Hopper's FP8 GEMMs take only a row-major first and a column-major second operand, so W's codes are
// transposed into a temporary for it. The frozen weight gets no gradient.
//
// Where the FP8 GEMM cannot run (no CUDA, no kernels in the policy or the build, a GPU before sm_89, a GEMM dtype
// other than BF16, sizes not multiples of 16), the same quantization runs through ATen and the GEMM through
// quant::fp8_gemm_reference (F32), forward and backward alike.
#pragma once

#include <ATen/ATen.h>

#include "model/kernel_policy.h"
#include "quant/fp8.h"

namespace ft::model {

// x [..., in] times w^T ([out, in]): [..., out] in the GEMM dtype (autocast's, else `weight_dtype`, the dtype the
// model's parameters have).
at::Tensor fp8_linear(const at::Tensor& x, const quant::Fp8Tensor& w, at::ScalarType weight_dtype,
                      const KernelPolicy& policy);

// The two GEMMs of a frozen weight held as e4m3 codes with row scales, shared with the NF4 base's FP8 compute
// (model/nf4_linear.h). `fast`: our kernels and _scaled_mm (fp8_gemm_available), else the ATen quantization and
// the F32 reference GEMM.
// y [N, out] = x [N, in] W^T: x quantized per row.
at::Tensor fp8_rows_forward(const at::Tensor& x, const quant::Fp8Tensor& w, at::ScalarType dtype, bool fast);
// dx [N, in] = dy [N, out] W, from W's codes transposed (codes_t [in, out]; row-major when fast) and its row
// scales [out], which are folded into dy's columns before dy is quantized per row.
at::Tensor fp8_rows_input_grad(const at::Tensor& dy, const at::Tensor& codes_t, const at::Tensor& scale,
                               at::ScalarType dtype, bool fast);

// Whether this build's kernels and `device` run the FP8 GEMM of an input in `dtype` (it must be BF16) with w.
bool fp8_gemm_available(at::Device device, at::ScalarType dtype, const quant::Fp8Tensor& w);
// kernels/fp8.h on x [rows, cols] (contiguous, CUDA, F32/BF16/F16), with col_scale F32 [cols] or undefined.
quant::Fp8Tensor fp8_quantize_rows_cuda(const at::Tensor& x, const at::Tensor& col_scale);
// codes [rows, cols] (F8E4M3FN, contiguous, CUDA, sizes multiples of 4) transposed: [cols, rows], contiguous.
at::Tensor fp8_transpose_cuda(const at::Tensor& codes);

}  // namespace ft::model

// The residual add fused into RMSNorm on CUDA (kernels/add_rms_norm.h) behind an autograd Function: the decoder's
// `h = residual + delta; normed = norm(h)` in one pass over memory forward and one backward (which also adds the
// gradient arriving through the residual stream), with the normalized output written straight in the dtype the
// following GEMMs read. Elsewhere, and for dtype combinations the kernel lacks, the model keeps the composite ops.
#pragma once

#include <ATen/ATen.h>

#include <utility>

namespace ft::model {

// True when this build has the kernel and it takes these tensors: CUDA, residual and delta [..., H] of one shape,
// weight [H], H <= 16384, and dtypes (residual, delta, weight, out) all equal (F32, BF16 or F16), or an F32
// residual and weight with a half delta and the output in that half or F32 (F32 master weights under autocast). `delta`
// undefined: the plain norm of `residual`.
bool add_rms_norm_available(const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
                            at::ScalarType out_dtype);

// residual [..., H] (its dtype: the stream's), delta [..., H] (any supported dtype), weight [H]. Returns
// (sum, normed): sum = residual + delta [..., H] in residual's dtype, computed in F32 and rounded once; normed =
// sum * rsqrt(mean(sum^2) + eps) * (weight + weight_offset) [..., H] in out_dtype, F32 math and one rounding
// (transformers' LlamaRMSNorm up to that rounding; weight_offset 1: Gemma's RMSNorm, exactly its F32 math).
// Differentiable in residual, delta and weight; saves only sum and the F32 [N] rstd.
// Precondition: add_rms_norm_available.
std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& residual, const at::Tensor& delta,
                                               const at::Tensor& weight, double eps, at::ScalarType out_dtype,
                                               double weight_offset = 0.0);

// The same kernel without the add: RMSNorm of x [..., H] into out_dtype. Bitwise equal to add_rms_norm's `normed`
// when x is that call's `sum` (what activation checkpointing's recompute relies on).
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, at::ScalarType out_dtype,
                          double weight_offset = 0.0);

}  // namespace ft::model

// The entry points of the decoder's ops: each picks our CUDA kernel (norm.h, rope.h, swiglu.h), a fused ATen path,
// or the ATen composite from the run's KernelPolicy and the tensors it is given, so the layers never decide. The
// attention's entry point is in model/attention.h, the projections' (grouped) in model/linear.h.
#pragma once

#include <ATen/ATen.h>

#include <utility>

#include "config/settings.h"
#include "model/kernel_policy.h"
#include "model/nf4_linear.h"
#include "quant/fp8.h"

namespace ft::model {

// RMSNorm's parameters. unit_offset (Gemma): normalize and scale by (1 + weight) in F32, then cast back; else
// transformers' Llama: normalize in F32, cast back, then scale.
struct NormSpec {
  at::Tensor weight;  // [dim]
  double eps = 1e-6;
  bool unit_offset = false;
};

// A projection's weight as its GEMM reads it: each Format has its own GEMM in ops::linear.
struct LinearWeight {
  enum class Format {
    kDense,        // `values`
    kNf4,          // `nf4`: frozen 4-bit row blocks (model/nf4_linear.h), dequantized to `dtype` outside autocast
    kFp8,          // `fp8`: frozen e4m3 codes with row scales (model/fp8_linear.h), GEMMs in `dtype` outside autocast
    kFp8Training,  // `values` trained with FP8 GEMMs of dynamic scales, `recipe` (model/fp8_training.h)
  };
  Format format = Format::kDense;
  at::Tensor values;  // kDense: [out, in]
  at::Tensor bias;    // [out] or undefined
  Nf4Rows nf4;        // kNf4: [out_i, in] blocks, stacked to [out, in]
  quant::Fp8Tensor fp8;               // kFp8: codes [out, in], scales [out]
  at::ScalarType dtype = at::kFloat;  // kNf4, kFp8: the dtype of the model's parameters
  Fp8Training recipe = Fp8Training::kOff;  // kFp8Training
  at::Tensor known_amax;  // kFp8Training: F32 [], the weight's amax from the step that wrote it, or undefined
  Nf4Compute nf4_compute = Nf4Compute::kDtype;  // kNf4: the GEMMs' precision (model/nf4_linear.h)

  static LinearWeight dense(at::Tensor values, at::Tensor bias) {
    LinearWeight w;
    w.values = std::move(values);
    w.bias = std::move(bias);
    return w;
  }
};

// q/k [B, T, H, D] rotated with cos/sin [B, T, D] (cast to q's dtype first): transformers' apply_rotary_pos_emb.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

namespace ops {

// RMSNorm of x [..., dim], as transformers computes it. Fused: at::_fused_rms_norm (x's dtype == weight's, not
// Gemma) or our kernel (Gemma's F32 math in x's dtype), F32 statistics and one rounding instead of the composite.
at::Tensor rms_norm(const at::Tensor& x, const NormSpec& norm, const KernelPolicy& policy);

// The residual add before the norm: returns (h, norm(h)) for h = residual + delta [..., dim] (h = residual when
// delta is undefined). Composite: exactly `h = residual + delta; rms_norm(h)`. With our kernels, one kernel
// (model/norm.h) does the add and the norm, and with `gemm_input` (the norm only feeds GEMMs) under autocast it
// writes norm(h) in the autocast dtype, the dtype the GEMMs would cast it to; otherwise in rms_norm's dtype. The
// norm of the same h is bitwise the same whether the add was fused or not (activation checkpointing recomputes a
// layer from its h alone).
std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& residual, const at::Tensor& delta,
                                               const NormSpec& norm, bool gemm_input, const KernelPolicy& policy);

// x [B, T, H, D] rotated with cos/sin [B, T, R]: the first R dims of each head turn (R < D: phi3's
// partial_rotary_factor), the rest pass. Our kernel where it takes x, else apply_rotary.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const KernelPolicy& policy);

// The gated MLP activation act(gate) * up for gate, up [..., I]: SwiGLU (silu), or Gemma's GeGLU (gelu_tanh: the
// tanh-approximate GELU). `joint` [N, 2 I] (gate first), when gate and up are its column halves (one GEMM made
// them), lets our kernel write their gradient as one tensor; undefined otherwise. Returns [..., I].
at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& joint, bool gelu_tanh,
                            const KernelPolicy& policy);

// x [..., in] times weight^T (+ bias): [..., out], the GEMM the weight's format takes.
at::Tensor linear(const at::Tensor& x, const LinearWeight& weight, const KernelPolicy& policy);

}  // namespace ops
}  // namespace ft::model

// What fp8_training.cpp (a group of projections reading one input) and fp8_mlp.cpp (the gated MLP as one op) share:
// the GEMMs of a group and their backward, with the casts of model/fp8_training.h.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "config/settings.h"
#include "model/kernel_policy.h"
#include "quant/fp8_cast.h"

namespace ft::model::fp8_detail {

// How one call casts and multiplies: the recipe, and whether our kernels and _scaled_mm run it.
struct Plan {
  Fp8Training recipe = Fp8Training::kTensorwise;
  bool fast = false;

  bool rowwise() const { return recipe == Fp8Training::kRowwise; }
  // Gradients: e5m2 under tensorwise scaling (its range), e4m3 under rowwise (torchao's ROWWISE).
  quant::Fp8Format grad_format() const { return rowwise() ? quant::Fp8Format::kE4m3 : quant::Fp8Format::kE5m2; }
};

// The GEMMs' dtype for x times weight^T: autocast's where it is on, else the weight's.
at::ScalarType gemm_dtype(const at::Tensor& x, const at::Tensor& weight);

// Whether the fast path takes x times weight^T: our kernels on an FP8 GPU, BF16 compute, sizes multiples of 16.
bool fast_path(const at::Tensor& x, const at::Tensor& weight, at::ScalarType dtype, const KernelPolicy& policy);

// The forward GEMMs of weights W_i [out_i, in] that read one x [N, in] (contiguous, in the GEMM dtype `dtype`):
// [N, out_i] each. `x_amax` (F32 [], tensorwise fast path only, else undefined) is x's amax as the kernel that
// wrote x computed it, so the cast skips its amax pass; `weight_amax` (one per weight, or none) the same for F32
// weights (fp8_training_linear's). Appends to `saved` what group_backward reads: rowwise {x},
// tensorwise {x^T codes, x's scale, then per weight W_i^T codes and scale} (1 byte per element), then W_1 .. W_k.
std::vector<at::Tensor> group_forward(const at::Tensor& x, const at::Tensor& x_amax, at::TensorList weights,
                                      at::ArrayRef<at::Tensor> weight_amax, const Plan& plan, at::ScalarType dtype,
                                      std::vector<at::Tensor>& saved);

// The backward of group_forward from the gradients of its outputs, grads [N, out_i] (undefined: none), with
// `grad_amax` F32 [k] (their amaxes as the kernel that wrote them computed them; tensorwise fast path only, else
// undefined) and `saved` exactly the entries group_forward appended. Returns {dx [N, in] in x_dtype, dW_1 .. dW_k}
// (dW_i undefined where grads[i] is).
std::vector<at::Tensor> group_backward(const std::vector<at::Tensor>& grads, const at::Tensor& grad_amax,
                                       at::ArrayRef<at::Tensor> saved, const Plan& plan, at::ScalarType dtype,
                                       at::ScalarType x_dtype);

}  // namespace ft::model::fp8_detail

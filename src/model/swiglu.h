// SwiGLU, silu(gate) * up (and Gemma's GeGLU, gelu_tanh(gate) * up), on CUDA in one kernel per direction
// (kernels/swiglu.h) behind an autograd Function: one rounding instead of two, one pass over memory instead of two
// forward and three backward, and two saved tensors instead of three. Elsewhere the MLP keeps the composite.
#pragma once

#include <ATen/ATen.h>

#include "kernels/swiglu.h"

namespace ft::model {

// True when this build has the kernel and it can take gate and up: CUDA, one dtype of F32/BF16/F16, equal shapes.
bool fused_swiglu_available(const at::Tensor& gate, const at::Tensor& up);

// silu(gate) * up (gelu_tanh: the tanh-approximate GELU of gate) for gate, up [..., I]; precondition:
// fused_swiglu_available.
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up, bool gelu_tanh = false);

// The same on the joint output of one gate/up GEMM, gate_up [N, 2 I] (gate first): returns [N, I], and the gradient
// is written as one [N, 2 I] tensor instead of two halves that autograd would concatenate.
at::Tensor fused_swiglu_joint(const at::Tensor& gate_up, bool gelu_tanh = false);

// The kernels without autograd, for ops that own their backward (model/fp8_mlp.cpp). Every tensor is [N, I] in one
// dtype with contiguous columns (a column block of a wider one too), on one CUDA device. out_amax: null, or an F32
// the caller zeroed that gets max |out|; `amax` likewise for d_gate and d_up (kernels/swiglu.h).
void swiglu_rows_forward(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out, bool gelu_tanh,
                         float* out_amax);
void swiglu_rows_backward(const at::Tensor& d_out, const at::Tensor& gate, const at::Tensor& up,
                          const at::Tensor& d_gate, const at::Tensor& d_up, bool gelu_tanh, kernels::GradAmax amax);

}  // namespace ft::model

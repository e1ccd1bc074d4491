// SwiGLU, silu(gate) * up (and Gemma's GeGLU, gelu_tanh(gate) * up), on CUDA in one kernel per direction
// (kernels/swiglu.h) behind an autograd Function: one rounding instead of two, one pass over memory instead of two
// forward and three backward, and two saved tensors instead of three. Elsewhere the MLP keeps the composite.
#pragma once

#include <ATen/ATen.h>

namespace ft::model {

// True when this build has the kernel and it can take gate and up: CUDA, one dtype of F32/BF16/F16, equal shapes.
bool fused_swiglu_available(const at::Tensor& gate, const at::Tensor& up);

// silu(gate) * up (gelu_tanh: the tanh-approximate GELU of gate) for gate, up [..., I]; precondition:
// fused_swiglu_available.
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up, bool gelu_tanh = false);

// The same on the joint output of one gate/up GEMM, gate_up [N, 2 I] (gate first): returns [N, I], and the gradient
// is written as one [N, 2 I] tensor instead of two halves that autograd would concatenate.
at::Tensor fused_swiglu_joint(const at::Tensor& gate_up, bool gelu_tanh = false);

}  // namespace ft::model

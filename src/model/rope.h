// Rotary position embedding: the composite ATen form (transformers' apply_rotary_pos_emb) and, on CUDA, one fused
// kernel per direction (kernels/rope.h) behind an autograd Function.
#pragma once

#include <ATen/ATen.h>

namespace ft::model {

// True when this build has the fused kernel and it can take x (CUDA, x's dtype == cos's, even head_dim).
bool fused_rope_available(const at::Tensor& x, const at::Tensor& cos);

// x [B, T, H, D] rotated with cos/sin [B, T, D] through the fused kernel; precondition: fused_rope_available.
at::Tensor fused_rope_apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace ft::model

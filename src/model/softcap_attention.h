// Attention with logit soft-capping (Gemma 2), which SDPA and flash attention lack, on CUDA: the math of the eager
// composite (softcapped_attention, model/attention.h) as two GEMMs around one row-wise kernel per direction
// (kernels/softcap_softmax.h) behind an autograd Function. It reads K and V once per KV head (no repeat for grouped
// queries) and saves tanh and the probabilities in the input dtype (4 bytes per score in bf16, against 8 for the
// composite's saved tanh, F32 softmax and bf16 probabilities).
#pragma once

#include <ATen/ATen.h>

namespace ft::model {

// True when this build has the kernel and it can take these inputs: CUDA, q, k and v of one dtype among F32, BF16
// and F16, H a multiple of Hkv.
bool fused_softcap_available(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// softcapped_attention (model/attention.h) through the kernel: q [B, H, T, D], k/v [B, Hkv, S, D], mask Bool
// [B or 1, 1, T, S] or undefined; returns [B, H, T, D]. Precondition: fused_softcap_available.
at::Tensor fused_softcapped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& mask, bool causal, double scale, double cap);

}  // namespace ft::model

// Attention with logit soft-capping (Gemma 2), which SDPA and flash attention lack: the eager composite that
// transformers' eager_attention_forward computes, and on CUDA the same math as two GEMMs around one row-wise kernel
// per direction (kernels/softcap_softmax.h) behind an autograd Function. The fused path reads K and V once per
// KV head (no repeat for grouped queries) and saves tanh and the probabilities in the input dtype (4 bytes per score
// in bf16, against 8 for the composite's saved tanh, F32 softmax and bf16 probabilities).
#pragma once

#include <ATen/ATen.h>

namespace ft::model {

// q [B, H, T, D], k/v [B, Hkv, S, D] with H a multiple of Hkv; mask Bool [B or 1, 1, T, S] (true = visible) or
// undefined; causal (with no mask): query i sees keys up to i + S - T. scores = cap * tanh(q k^T * scale / cap),
// softmax in F32, back to q's dtype, times v. Returns [B, H, T, D].
at::Tensor softcapped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                bool causal, double scale, double cap);

// True when this build has the kernel and it can take these inputs: CUDA, q, k and v of one dtype among F32, BF16
// and F16, H a multiple of Hkv.
bool fused_softcap_available(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// softcapped_attention through the kernel; precondition: fused_softcap_available.
at::Tensor fused_softcapped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& mask, bool causal, double scale, double cap);

}  // namespace ft::model

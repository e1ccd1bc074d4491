// The language-model loss without its largest tensor: cross-entropy of hidden @ weight^T computed in chunks of rows,
// so the [N, V] logits never exist in F32 at once (Liger's FusedLinearCrossEntropy, Apple's cut-cross-entropy).
#pragma once

#include <ATen/ATen.h>

namespace ft::model {

// Sum over rows of cross_entropy(hidden @ weight^T, labels), labels == -100 ignored, with the same numerics as
// at::cross_entropy_loss on logits computed in `compute_dtype` and upcast to F32. When autograd needs them, the
// gradients of hidden and weight are produced chunk by chunk in the same pass and kept (hidden's shape, and an F32
// copy of weight's) until backward scales them by the incoming gradient; a frozen weight costs no gradient matmul.
// hidden [N, H] (any float dtype); weight [V, H]; labels I64 [N]; chunk_rows 0 = rows whose F32 logits take about
// 1 GiB; softcap > 0: the logits are soft-capped first, softcap * tanh(logits / softcap) in compute_dtype (Gemma 2's
// final_logit_softcapping). Returns F32 [].
at::Tensor linear_cross_entropy_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                    at::ScalarType compute_dtype, int64_t chunk_rows = 0, double softcap = 0.0);

// The same per row: F32 [N], row i the cross-entropy of row i (0 where labels[i] == -100), differentiable. For
// objectives that weight rows differently (the preference losses sum log-probs per sequence). Hidden's gradient is
// made in forward as above; a trainable weight's gradient recomputes the logits in backward, chunk by chunk.
at::Tensor linear_cross_entropy_rows(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                     at::ScalarType compute_dtype, int64_t chunk_rows = 0, double softcap = 0.0);

// True when this build has the cross-entropy kernel (kernels/cross_entropy.h) and it takes logits [n, V]: CUDA,
// F32/BF16/F16, unit column stride.
bool fused_cross_entropy_rows_available(const at::Tensor& logits);

// The per-row losses F32 [n] of logits [n, V] against labels I64 [n] in one kernel (rows labelled ignore_index:
// loss 0); with `grad` the logits become, in place, the gradient of the summed loss (ignored rows: zeros).
// Precondition: fused_cross_entropy_rows_available.
at::Tensor fused_cross_entropy_rows(at::Tensor& logits, const at::Tensor& labels, int64_t ignore_index, bool grad);

}  // namespace ft::model

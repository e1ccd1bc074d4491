// The rows around an MoE layer's grouped GEMMs on CUDA (kernels/moe_rows.h) behind autograd Functions: the dispatch
// of each token's row to its k sorted slots, and the router-weighted sum of the slots' output rows back per token.
// Both equal ops::moe_experts' ATen composite (which expands, permutes, multiplies and sums) up to the order of F32
// additions, with one pass over the rows each way. Chosen by ops::moe_experts from the KernelPolicy.
#pragma once

#include <ATen/ATen.h>

#include "model/moe_experts.h"

namespace ft::model {

// Whether this build's kernels take the rows: y (the experts' output, or x for the dispatch) a CUDA matrix of
// F32/BF16/F16 and `weights` (when defined) on its device in its dtype or F32.
bool moe_rows_available(const at::Tensor& y, const at::Tensor& weights);

// xs [S, hidden]: x [N, hidden]'s row of each sorted slot (x[order[s] / k]). Backward sums each token's k slot
// gradients (in order of j, F32, rounded once).
at::Tensor moe_dispatch_rows(const at::Tensor& x, const ops::ExpertSlots& slots, int64_t k);

// [N, hidden]: per token the sum over its k choices of y[s] * weights_sorted[s] (each product rounded to y's dtype),
// with y [S, hidden] in slot order and weights_sorted [S] (the router's weights in slot order). Differentiable in y
// and weights_sorted.
at::Tensor moe_combine_rows(const at::Tensor& y, const at::Tensor& weights_sorted, const ops::ExpertSlots& slots,
                            int64_t k);

}  // namespace ft::model

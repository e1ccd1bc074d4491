// The experts of a mixture-of-experts layer, dropless: every (token, k) choice is computed, none is dropped for
// capacity. One stable sort of the N * k choices by expert gives each expert a contiguous slice of rows; both
// projections then run as grouped GEMMs over those slices, and the weighted outputs are summed back per token. The
// kernel choice lives here, read from the KernelPolicy as the other op entry points (model/ops.h) do.
#pragma once

#include <ATen/ATen.h>

#include "model/kernel_policy.h"

namespace ft::model::ops {

// The (token, k) choices of N tokens sorted by expert.
struct ExpertSlots {
  at::Tensor order;    // I64 [N * k]: the flat choice (token * k + j) at each sorted position (stable)
  at::Tensor inverse;  // I64 [N * k]: the sorted position of each flat choice
  at::Tensor ends;     // I32 [E]: the end of each expert's slice of sorted positions (at::_grouped_mm's offsets)
};
ExpertSlots sort_by_expert(const at::Tensor& experts, int64_t num_experts);  // experts I64 [N, k]

// x [S, K] (rows sorted by expert, slices ending at `ends`) times each slice's expert weight w [E, N, K]
// transposed: [S, N]. With policy.group_gemms, one at::_grouped_mm (on CUDA: bf16, K and N multiples of 8) where it
// takes the tensors; else one GEMM per non-empty expert (reads the slice lengths on the host).
at::Tensor grouped_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& ends, const KernelPolicy& policy);

// x [N, hidden] through the experts each token chose (experts I64 [N, k], weights [N, k]): the sum over its k
// choices of weight * down_proj[e](silu(gate) * up) with (gate, up) = gate_up_proj[e] x; [N, hidden] in x's dtype.
// gate_up_proj [E, 2 I, hidden], down_proj [E, hidden, I]; cast to x's dtype (autocast) where they differ.
at::Tensor moe_experts(const at::Tensor& x, const at::Tensor& experts, const at::Tensor& weights,
                       const at::Tensor& gate_up_proj, const at::Tensor& down_proj, const KernelPolicy& policy);

}  // namespace ft::model::ops

// The experts of a mixture-of-experts layer, dropless: every (token, k) choice is computed, none is dropped for
// capacity. One stable sort of the N * k choices by expert gives each expert a contiguous slice of rows; both
// projections then run as grouped GEMMs over those slices, and the weighted outputs are summed back per token. The
// kernel choice lives here, read from the KernelPolicy as the other op entry points (model/ops.h) do.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "model/kernel_policy.h"
#include "model/quantized_experts.h"

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

// A LoRA adapter on a stack of E weights [E, out, in] laid out as PEFT's ParamWrapper holds it: expert e's update is
// scaling * B_e A_e with A_e = a[e r : (e + 1) r] and B_e[:, j] = b[:, j E + e] (PEFT reshapes b to [out, r, E]).
struct ExpertAdapter {
  at::Tensor a;  // F32 [E r, in]
  at::Tensor b;  // F32 [out, E r]
  double scaling = 0.0;
  int64_t experts = 1;
  at::Tensor a_per_expert() const;  // [E, r, in] (a view)
  at::Tensor b_per_expert() const;  // [E, out, r] (a strided view)
  // x [S, in] (sorted by expert, slices ending at `ends`) through each slice's B_e A_e, times scaling: [S, out].
  at::Tensor delta(const at::Tensor& x, const at::Tensor& ends, const KernelPolicy& policy) const;
  at::Tensor delta_weight() const;  // F32 [E, out, in]: scaling * B_e A_e for every expert
};

// An experts' weight stack [E, N, K] as the grouped GEMMs read it: a dense tensor (a parameter, frozen or trained),
// or frozen codes (model/quantized_experts.h).
struct ExpertWeight {
  at::Tensor dense;                                   // [E, N, K], or undefined
  std::shared_ptr<const QuantizedExperts> quantized;  // where `dense` is undefined
  at::IntArrayRef sizes() const { return dense.defined() ? dense.sizes() : at::IntArrayRef(quantized->shape); }
};

// x [S, K] (sorted by expert, slices ending at `ends`) times each slice's expert weight transposed, in `dtype`:
// [S, N]. The entry point of both formats: grouped_gemm on the dense weight cast to `dtype`, or
// quantized_grouped_gemm.
at::Tensor expert_gemm(const at::Tensor& x, const ExpertWeight& w, const at::Tensor& ends, at::ScalarType dtype,
                       const KernelPolicy& policy);

// x [N, hidden] through the experts each token chose (experts I64 [N, k], weights [N, k]): the sum over its k
// choices of weight * down_proj[e](silu(gate) * up) with (gate, up) = gate_up_proj[e] x; [N, hidden] in x's dtype.
// gate_up_proj [E, 2 I, hidden], down_proj [E, hidden, I]. The GEMMs run in autocast's dtype where autocast is on,
// else in x's (the weights cast or dequantized to it). The adapters, when given with a defined `a`, add their update to
// each projection.
at::Tensor moe_experts(const at::Tensor& x, const at::Tensor& experts, const at::Tensor& weights,
                       const ExpertWeight& gate_up_proj, const ExpertWeight& down_proj, const KernelPolicy& policy,
                       const ExpertAdapter* gate_up_lora = nullptr, const ExpertAdapter* down_lora = nullptr);

}  // namespace ft::model::ops

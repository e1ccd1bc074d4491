#include "model/moe_experts.h"

#include <ATen/autocast_mode.h>

#include <vector>

#include "model/moe_rows.h"
#include "model/ops.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::model::ops {
namespace {

// at::_grouped_mm's conditions: the same dtype (bf16 on CUDA, where its CUTLASS kernel runs; its CPU fallback
// takes any float), and rows of x and of w (whose transpose it reads column-major) 16-byte aligned.
bool grouped_mm_takes(const at::Tensor& x, const at::Tensor& w) {
  if (x.scalar_type() != w.scalar_type() || x.dim() != 2 || w.dim() != 3) return false;
  if (x.is_cuda() && x.scalar_type() != at::kBFloat16) return false;
  const int64_t align = 16 / static_cast<int64_t>(x.element_size());
  return x.size(1) % align == 0 && w.size(1) % align == 0;
}

// The dtype of the experts' GEMMs: autocast's where it is on (at::_grouped_mm is no autocast op; the input may come
// from a composite norm in F32), else x's.
at::ScalarType gemm_dtype(const at::Tensor& x) {
  const auto type = x.device().type();
  return at::autocast::is_autocast_enabled(type) ? at::autocast::get_autocast_dtype(type) : x.scalar_type();
}

// One GEMM per expert on its slice: the composite path (CPU, and where at::_grouped_mm does not apply).
at::Tensor gemm_per_expert(const at::Tensor& x, const at::Tensor& w, const at::Tensor& ends) {
  const at::Tensor ends_host = ends.to(at::kCPU, at::kLong);  // a host sync, as the composite needs the lengths
  const int64_t* end = ends_host.data_ptr<int64_t>();
  std::vector<at::Tensor> parts;  // [n_e, N] per non-empty expert, in expert order
  int64_t start = 0;
  for (int64_t e = 0; e < ends_host.size(0); ++e) {
    if (end[e] > start) parts.push_back(at::matmul(x.narrow(0, start, end[e] - start), w[e].t()));
    start = end[e];
  }
  if (parts.empty()) return at::zeros({x.size(0), w.size(1)}, x.options());
  return at::cat(parts, 0);  // [S, N]
}

}  // namespace

ExpertSlots sort_by_expert(const at::Tensor& experts, int64_t num_experts) {
  const at::Tensor flat = experts.reshape({-1});  // I64 [S]
  ExpertSlots s;
  s.order = at::argsort(flat, /*stable=*/true);                                // I64 [S]
  const at::Tensor sorted = flat.index_select(0, s.order);                     // I64 [S], ascending
  const at::Tensor ids = at::arange(num_experts, flat.options());              // I64 [E]
  s.ends = at::searchsorted(sorted, ids, /*out_int32=*/true, /*right=*/true);  // I32 [E]: choices <= e
  s.inverse = at::empty_like(s.order).scatter_(0, s.order, at::arange(flat.size(0), flat.options()));
  return s;
}

at::Tensor grouped_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& ends, const KernelPolicy& policy) {
  FT_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2) && ends.size(0) == w.size(0),
           fmt::format("grouped_gemm: x [{}] and w [{}] do not chain", fmt::join(x.sizes(), ", "),
                       fmt::join(w.sizes(), ", ")));
  const at::Tensor xc = x.contiguous();
  if (policy.group_gemms && grouped_mm_takes(xc, w)) {
    return at::_grouped_mm(xc, w.transpose(-2, -1), ends);  // [S, N]
  }
  return gemm_per_expert(xc, w, ends);
}

at::Tensor expert_gemm(const at::Tensor& x, const ExpertWeight& w, const at::Tensor& ends, at::ScalarType dtype,
                       const KernelPolicy& policy) {
  if (w.dense.defined()) return grouped_gemm(x, w.dense.to(dtype), ends, policy);
  return quantized_grouped_gemm(x, w.quantized, ends, dtype, policy);
}

at::Tensor ExpertAdapter::a_per_expert() const {
  return a.view({experts, a.size(0) / experts, a.size(1)});  // [E, r, in]
}

at::Tensor ExpertAdapter::b_per_expert() const {
  return b.view({b.size(0), b.size(1) / experts, experts}).permute({2, 0, 1});  // [E, out, r]
}

at::Tensor ExpertAdapter::delta(const at::Tensor& x, const at::Tensor& ends, const KernelPolicy& policy) const {
  const at::Tensor a3 = a_per_expert().to(x.scalar_type());  // [E, r, in]
  // The scaling goes into B (E r out values) rather than onto the [S, out] result: one pass over it less.
  const at::Tensor b3 = (b_per_expert() * scaling).to(x.scalar_type()).contiguous();  // [E, out, r]
  return grouped_gemm(grouped_gemm(x, a3, ends, policy), b3, ends, policy);           // [S, out]
}

at::Tensor ExpertAdapter::delta_weight() const {
  return at::bmm(b_per_expert().to(at::kFloat), a_per_expert().to(at::kFloat)) * scaling;  // [E, out, in]
}

at::Tensor moe_experts(const at::Tensor& x, const at::Tensor& experts, const at::Tensor& weights,
                       const ExpertWeight& gate_up_proj, const ExpertWeight& down_proj, const KernelPolicy& policy,
                       const ExpertAdapter* gate_up_lora, const ExpertAdapter* down_lora) {
  const int64_t n = x.size(0), k = experts.size(1), hidden = x.size(1), inter = down_proj.sizes()[2];
  const ExpertSlots slots = sort_by_expert(experts, gate_up_proj.sizes()[0]);
  const at::ScalarType dtype = gemm_dtype(x);
  // Our row kernels (model/moe_rows.h) where they take the tensors and x is in the GEMMs' dtype already.
  const bool row_kernels = policy.kernels_for(x) && x.scalar_type() == dtype && moe_rows_available(x, weights);
  // Each token's row repeated k times, then in expert order. Gathering through the expanded view makes backward a
  // permutation (no two rows land on one) followed by a sum over k: deterministic on CUDA, unlike an index_add.
  const at::Tensor xs =
      row_kernels
          ? moe_dispatch_rows(x, slots, k)
          : x.to(dtype).unsqueeze(1).expand({n, k, hidden}).reshape({n * k, hidden}).index_select(0, slots.order);
  at::Tensor gu = expert_gemm(xs, gate_up_proj, slots.ends, dtype, policy);  // [S, 2 I]
  // In place: the grouped GEMM's backward does not read its output.
  if (gate_up_lora != nullptr && gate_up_lora->a.defined()) gu.add_(gate_up_lora->delta(xs, slots.ends, policy));
  const at::Tensor act = gated_activation(gu.narrow(1, 0, inter), gu.narrow(1, inter, inter), gu, false, policy);
  at::Tensor y = expert_gemm(act, down_proj, slots.ends, dtype, policy);  // [S, hidden]
  if (down_lora != nullptr && down_lora->a.defined()) y.add_(down_lora->delta(act, slots.ends, policy));
  // Weighted in the weights' dtype (mixtral: F32, then rounded), as transformers multiplies them.
  const at::Tensor w = weights.reshape({-1}).index_select(0, slots.order);  // [S]
  if (row_kernels) return moe_combine_rows(y, w, slots, k);                 // [N, hidden]
  const at::Tensor weighted = (y * w.unsqueeze(1)).to(x.scalar_type());     // [S, hidden]
  return weighted.index_select(0, slots.inverse).view({n, k, hidden}).sum(1);
}

}  // namespace ft::model::ops

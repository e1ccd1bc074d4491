// Soft-capped attention (Gemma 2) through the fused kernel against the eager composite transformers computes:
// outputs and the gradients of q, k and v, with grouped queries, causal rows (also queries after a cache), dense
// Bool masks (one per batch and one broadcast), rows that see every key, and row lengths off the vector width.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fused_test_util.h"
#include "model/attention.h"
#include "model/softcap_attention.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

struct AttentionCase {
  std::string name;
  int64_t b, h, hkv, t, s, d;
  bool causal;
  std::string mask;  // "", "per_batch" (block-diagonal pieces) or "broadcast" (a sliding window after a cache)
};

struct Result {
  at::Tensor out, dq, dk, dv;
};

// The mask of a case: Bool [B or 1, 1, T, S], true = visible, or undefined.
at::Tensor make_mask(const AttentionCase& c, const at::TensorOptions& opts) {
  if (c.mask.empty()) return {};
  const at::Tensor q_pos = at::arange(c.s - c.t, c.s, opts.dtype(at::kLong)).unsqueeze(1);  // [T, 1]
  const at::Tensor k_pos = at::arange(0, c.s, opts.dtype(at::kLong)).unsqueeze(0);          // [1, S]
  at::Tensor m = k_pos <= q_pos;
  if (c.mask == "broadcast") return m.logical_and(q_pos - k_pos < 5).view({1, 1, c.t, c.s});
  // Pieces of 7 tokens in batch 0 and 11 in batch 1 (T == S).
  std::vector<at::Tensor> per_batch;
  for (int64_t b = 0; b < c.b; ++b) {
    const at::Tensor seg = at::arange(0, c.s, opts.dtype(at::kLong)).div(b % 2 == 0 ? 7 : 11, "floor");
    per_batch.push_back(m.logical_and(seg.unsqueeze(1) == seg.unsqueeze(0)));
  }
  return at::stack(per_batch).unsqueeze(1);
}

Result run(bool fused, const AttentionCase& c, const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0,
           const at::Tensor& mask, const at::Tensor& weight, double scale, double cap) {
  at::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
             v = v0.clone().requires_grad_(true);
  const at::Tensor out = fused ? model::fused_softcapped_attention(q, k, v, mask, c.causal, scale, cap)
                               : model::softcapped_attention(q, k, v, mask, c.causal, scale, cap);
  if (fused) {
    EXPECT_EQ(count_nodes(out, "SoftcapAttention"), 1) << c.name;
  }
  (out.to(at::kFloat) * weight).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

TEST(FusedSoftcapAttention, GpuMatchesTheEagerCompositeWithMasksAndGroupedQueries) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  const std::vector<AttentionCase> cases = {
      {"causal gqa", 2, 4, 2, 37, 37, 32, true, ""},  // 37 keys: the scalar path
      {"causal mha", 2, 4, 4, 64, 64, 16, true, ""},  // vector path
      {"packed pieces", 2, 4, 2, 48, 48, 32, false, "per_batch"},
      {"window after a cache", 2, 6, 2, 5, 24, 32, false, "broadcast"},
      {"causal after a cache", 1, 4, 1, 6, 40, 16, true, ""},  // query i at key position i + 34
      {"one query sees all", 3, 2, 1, 1, 9, 8, false, ""},
  };
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const AttentionCase& c : cases) {
      at::manual_seed(7);
      const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
      // Scores of a few units, so a cap of 2 bends them.
      const at::Tensor q = (at::randn({c.b, c.h, c.t, c.d}, opts) * 0.7).to(dtype);
      const at::Tensor k = (at::randn({c.b, c.hkv, c.s, c.d}, opts) * 0.7).to(dtype);
      const at::Tensor v = at::randn({c.b, c.hkv, c.s, c.d}, opts).to(dtype);
      const at::Tensor w = at::randn({c.b, c.h, c.t, c.d}, opts);
      const at::Tensor mask = make_mask(c, opts);
      const double scale = 1.0 / std::sqrt(24.0), cap = 2.0;
      // The reference in F32 from the same (rounded) inputs.
      const Result ref = run(false, c, q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), mask, w, scale, cap);
      const Result got = run(true, c, q, k, v, mask, w, scale, cap);
      const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
      const std::string what = c.name + (dtype == at::kFloat ? " f32" : " bf16");
      EXPECT_LT(rel(got.out, ref.out), tol) << what;
      EXPECT_LT(rel(got.dq, ref.dq), 3 * tol) << what;
      EXPECT_LT(rel(got.dk, ref.dk), 3 * tol) << what;
      EXPECT_LT(rel(got.dv, ref.dv), 3 * tol) << what;
      EXPECT_EQ(got.dk.sizes(), k.sizes()) << what;
    }
  }
}

TEST(FusedSoftcapAttention, AvailableOnlyForCudaTensorsOfOneDtype) {
  const at::Tensor cpu = at::zeros({1, 2, 3, 8});
  EXPECT_FALSE(model::fused_softcap_available(cpu, cpu, cpu));
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  const at::Tensor q = at::zeros({1, 4, 3, 8}, at::TensorOptions().device(at::kCUDA));
  const at::Tensor kv = at::zeros({1, 2, 3, 8}, at::TensorOptions().device(at::kCUDA));
  EXPECT_TRUE(model::fused_softcap_available(q, kv, kv));
  EXPECT_FALSE(model::fused_softcap_available(q, kv.to(at::kBFloat16), kv));
  EXPECT_FALSE(model::fused_softcap_available(q, q.narrow(1, 0, 3), q.narrow(1, 0, 3)));  // 4 heads over 3
}

}  // namespace
}  // namespace ft::test

// Attention over packed short pieces through our kernel (model/short_attention.h) against F32 attention under the
// dense block-diagonal causal mask of the same pieces: outputs and the gradients of q, k and v, with grouped and
// plain heads, head sizes 64 and 128, BF16 and F16, pieces of 1 to 64 tokens at every offset of a tile, and token
// counts off the 64-token tile. Then the plan: packed rows take the kernel only while every piece fits it.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fused_test_util.h"
#include "model/attention.h"
#include "model/short_attention.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

// Piece offsets I32 [S + 1] over `tokens` with lengths drawn from [1, longest] (the last piece takes the rest).
std::vector<int32_t> random_pieces(int64_t tokens, int64_t longest, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int32_t> cu{0};
  while (cu.back() < tokens) {
    const int64_t len = at::randint(1, longest + 1, {1}, gen).item<int64_t>();
    cu.push_back(static_cast<int32_t>(std::min<int64_t>(tokens, cu.back() + len)));
  }
  return cu;
}

struct Grads {
  at::Tensor out, dq, dk, dv;
};

// The reference: q [N, H, D], k/v [N, Hkv, D] as one sequence under the bool mask start[i] <= j <= i, in F32.
Grads reference(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& start,
                const at::Tensor& w, double scale) {
  at::Tensor q = q0.to(at::kFloat).requires_grad_(true), k = k0.to(at::kFloat).requires_grad_(true),
             v = v0.to(at::kFloat).requires_grad_(true);
  const int64_t n = q.size(0), groups = q.size(1) / k.size(1);
  const at::Tensor pos = at::arange(n, start.options().dtype(at::kLong));
  const at::Tensor first = start.to(at::kLong).unsqueeze(1);                                              // [N, 1]
  const at::Tensor mask = (pos.unsqueeze(0) >= first).logical_and(pos.unsqueeze(0) <= pos.unsqueeze(1));  // [N, N]
  const at::Tensor qt = q.transpose(0, 1).unsqueeze(0);                               // [1, H, N, D]
  const at::Tensor kt = k.repeat_interleave(groups, 1).transpose(0, 1).unsqueeze(0);  // [1, H, N, D]
  const at::Tensor vt = v.repeat_interleave(groups, 1).transpose(0, 1).unsqueeze(0);
  const at::Tensor out = at::scaled_dot_product_attention(qt, kt, vt, mask.view({1, 1, n, n}), 0.0, false, scale)
                             .squeeze(0)
                             .transpose(0, 1);  // [N, H, D]
  (out * w).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

Grads kernel(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& start,
             const at::Tensor& w, double scale) {
  at::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
             v = v0.clone().requires_grad_(true);
  const int64_t n = q.size(0);
  // As the model calls it: [B, T, H, D] with B * T = N (one row here).
  const at::Tensor out = model::short_piece_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), start, scale)
                             .view({n, q.size(1), q.size(2)});
  EXPECT_EQ(count_nodes(out, "ShortPieceAttention"), 1);
  (out.to(at::kFloat) * w).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

TEST(ShortPieceAttention, GpuMatchesTheBlockDiagonalMaskForwardAndBackward) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    int64_t tokens, heads, kv_heads, dim, longest;
  };
  const std::vector<Case> cases = {
      {300, 8, 2, 64, 64},   // grouped queries, pieces up to the limit, 300 = 4 tiles + 44
      {256, 4, 4, 128, 40},  // plain heads of 128
      {77, 2, 1, 64, 3},     // pieces of 1-3 tokens
      {190, 6, 3, 128, 64},
  };
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    for (const Case& c : cases) {
      at::manual_seed(11);
      const auto cu = random_pieces(c.tokens, c.longest, 3 + c.tokens);
      const at::Tensor cu_t = at::tensor(cu, at::kInt).to(at::kCUDA);
      const at::Tensor lengths = cu_t.narrow(0, 1, cu_t.size(0) - 1) - cu_t.narrow(0, 0, cu_t.size(0) - 1);
      const at::Tensor start = at::repeat_interleave(cu_t.narrow(0, 0, cu_t.size(0) - 1), lengths);  // I32 [N]
      const at::Tensor q = at::randn({c.tokens, c.heads, c.dim}, opts).to(dtype);
      const at::Tensor k = at::randn({c.tokens, c.kv_heads, c.dim}, opts).to(dtype);
      const at::Tensor v = at::randn({c.tokens, c.kv_heads, c.dim}, opts).to(dtype);
      const at::Tensor w = at::randn({c.tokens, c.heads, c.dim}, opts);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
      const Grads ref = reference(q, k, v, start, w, scale);
      const Grads got = kernel(q, k, v, start, w, scale);
      const std::string what =
          std::to_string(c.tokens) + " tokens, D " + std::to_string(c.dim) + ", " + std::string(c10::toString(dtype));
      const double tol = dtype == at::kHalf ? 5e-3 : 2e-2;
      EXPECT_LT(rel(got.out, ref.out), tol) << what;
      EXPECT_LT(rel(got.dq, ref.dq), 2 * tol) << what;
      EXPECT_LT(rel(got.dk, ref.dk), 2 * tol) << what;
      EXPECT_LT(rel(got.dv, ref.dv), 2 * tol) << what;
    }
  }
}

TEST(ShortPieceAttention, AvailableOnlyForHalfPrecisionCudaTensorsAndShortPieces) {
  const at::Tensor cpu = at::zeros({1, 8, 4, 64}, at::kBFloat16);
  EXPECT_FALSE(model::short_attention_available(cpu, cpu, cpu, 16));
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor q = at::zeros({1, 8, 4, 64}, opts), kv = at::zeros({1, 8, 2, 64}, opts);
  EXPECT_TRUE(model::short_attention_available(q, kv, kv, 64));
  EXPECT_FALSE(model::short_attention_available(q, kv, kv, 65));
  EXPECT_FALSE(model::short_attention_available(q.to(at::kFloat), kv.to(at::kFloat), kv.to(at::kFloat), 16));
  const at::Tensor q96 = at::zeros({1, 8, 4, 96}, opts), kv96 = at::zeros({1, 8, 2, 96}, opts);
  EXPECT_FALSE(model::short_attention_available(q96, kv96, kv96, 16));
}

// A batch of short pieces takes the kernel; one piece past the limit sends the whole batch to varlen flash
// attention; the log line names both.
TEST(ShortPieceAttention, GpuPlanTakesTheKernelOnlyWhenEveryPieceFits) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  model::ModelArgs a;
  a.hidden_size = 256;
  a.num_layers = 1;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 64;
  const model::KernelPolicy policy = cuda_policy(true);
  const at::Tensor cu = at::tensor(std::vector<int32_t>{0, 30, 64, 128}, at::kInt).to(at::kCUDA);
  for (const int64_t longest : {int64_t{64}, int64_t{65}}) {
    model::PackedPieces packed{cu, longest};
    model::AttentionBatch batch;
    batch.segment_ids = at::zeros({2, 64}, at::TensorOptions().device(at::kCUDA).dtype(at::kInt));
    batch.packed = &packed;
    batch.rows = 2;
    batch.length = 64;
    batch.device = at::kCUDA;
    batch.compute_dtype = at::kBFloat16;
    const model::AttentionPlan plan = model::AttentionPlan::build(a, policy, batch);
    const model::AttentionMask& m = plan.for_layer(a, 0);
    if (longest <= 64) {
      EXPECT_EQ(m.kernel, model::AttentionKernel::kShortPieces);
      std::vector<int32_t> want(128);
      for (int i = 0; i < 128; ++i) want[i] = i < 30 ? 0 : (i < 64 ? 30 : 64);
      EXPECT_TRUE(at::equal(m.piece_start.cpu(), at::tensor(want, at::kInt)));
    } else {
      EXPECT_EQ(m.kernel, model::AttentionKernel::kFlashVarlen);
    }
  }
  EXPECT_NE(model::AttentionPlan::describe(a, policy, true).find("short-piece attention kernel"), std::string::npos);
}

}  // namespace
}  // namespace ft::test

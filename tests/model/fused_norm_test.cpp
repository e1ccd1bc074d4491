// The fused norms against the composite ATen ops they replace (GPU; skipped without CUDA): at::_fused_rms_norm, and
// the residual add fused into RMSNorm (model/norm.h) with its dtype combinations, determinism and fallbacks.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include "fused_test_util.h"
#include "model/layers.h"
#include "model/norm.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

TEST(FusedKernels, GpuFusedRmsNormMatchesTheCompositeForwardAndBackward) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    model::RMSNorm norm(64, 1e-5);
    norm->to(at::kCUDA, dtype);
    {
      at::NoGradGuard g;
      norm->weight.uniform_(0.5, 1.5);
    }
    const at::Tensor x0 = at::randn({4, 33, 64}, at::TensorOptions().device(at::kCUDA).dtype(dtype));
    auto run = [&](bool fused) {
      const model::KernelPolicy policy = cuda_policy(fused);
      norm->weight.mutable_grad() = at::Tensor();
      at::Tensor x = x0.clone().requires_grad_(true);
      at::Tensor y = norm->forward(x, policy);
      (y.to(at::kFloat) * at::linspace(-1, 1, 64, x.options().dtype(at::kFloat))).sum().backward();
      return std::make_tuple(y.detach(), x.grad(), norm->weight.grad().clone());
    };
    const auto [y0, dx0, dw0] = run(false);
    const auto [y1, dx1, dw1] = run(true);
    const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_LT(rel(y1, y0), tol);
    EXPECT_LT(rel(dx1, dx0), tol);
    EXPECT_LT(rel(dw1, dw0), tol);
  }
}

// Gemma's RMSNorm (x * rsqrt(mean(x^2) + eps) * (1 + w), all in F32) through the kernels' weight offset, plain and
// with the residual add, against its composite: F32, all-bf16 (a LoRA base) and F32 weights under a bf16 delta.
TEST(FusedKernels, GpuGemmaNormsMatchTheCompositeForwardAndBackward) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(4);
  const auto dev = at::TensorOptions().device(at::kCUDA);
  for (const auto& [stream, delta_dtype] : {std::pair{at::kFloat, at::kFloat}, std::pair{at::kBFloat16, at::kBFloat16},
                                            std::pair{at::kFloat, at::kBFloat16}}) {
    model::RMSNorm norm(256, 1e-6, /*unit_offset=*/true);
    norm->to(at::kCUDA, stream);
    {
      at::NoGradGuard g;
      norm->weight.normal_(0.0, 0.3);
    }
    const at::Tensor r0 = (at::randn({3, 100, 256}, dev) * 3).to(stream);
    const at::Tensor d0 = at::randn({3, 100, 256}, dev).to(delta_dtype);
    const at::Tensor up = at::randn({3, 100, 256}, dev);
    auto run = [&](bool fused) {
      const model::KernelPolicy policy = cuda_policy(fused);
      norm->weight.mutable_grad() = at::Tensor();
      at::Tensor r = r0.clone().requires_grad_(true), d = d0.clone().requires_grad_(true);
      const auto [sum, normed] = norm->add_forward(r, d, /*gemm_input=*/false, policy);
      const at::Tensor plain = norm->forward(d, policy);  // Gemma's post-norms: the plain norm of a layer output
      ((normed.to(at::kFloat) + plain.to(at::kFloat)) * up).sum().backward();
      return std::make_tuple(normed.detach(), plain.detach(), r.grad(), d.grad(), norm->weight.grad().clone());
    };
    const auto ref = run(false);
    const auto got = run(true);
    const double tol = stream == at::kFloat && delta_dtype == at::kFloat ? 1e-5 : 2e-2;
    const std::string what = std::string(c10::toString(stream)) + "/" + c10::toString(delta_dtype);
    EXPECT_EQ(std::get<0>(got).scalar_type(), stream) << what;  // Gemma's norm returns its input's dtype
    EXPECT_LT(rel(std::get<0>(got), std::get<0>(ref)), tol) << what;
    EXPECT_LT(rel(std::get<1>(got), std::get<1>(ref)), tol) << what;
    EXPECT_LT(rel(std::get<2>(got), std::get<2>(ref)), tol) << what;
    EXPECT_LT(rel(std::get<3>(got), std::get<3>(ref)), tol) << what;
    EXPECT_LT(rel(std::get<4>(got), std::get<4>(ref)), tol) << what;
  }
}

// The residual add fused into RMSNorm (model/norm.h) against the composite path it replaces: h = residual + delta,
// then RMSNormImpl's composite norm, cast to the output dtype (what the following GEMM reads).
struct AddNormCase {
  at::ScalarType residual, delta, weight, out;
  const char* name;
};

struct AddNormRun {
  at::Tensor sum, normed;                                   // forward outputs
  at::Tensor grad_residual, grad_delta, grad_weight;        // gradients of the inputs
};

// loss = sum(normed * up_normed) (+ sum(sum * up_sum) when `use_sum`: a gradient through the residual stream; without
// it the op's grad_sum is undefined).
AddNormRun run_add_norm(bool fused, const AddNormCase& c, const at::Tensor& r0, const at::Tensor& d0,
                        const at::Tensor& w0, const at::Tensor& up_normed, const at::Tensor& up_sum, bool use_sum) {
  at::Tensor r = r0.clone().requires_grad_(true);
  at::Tensor d = d0.clone().requires_grad_(true);
  at::Tensor w = w0.clone().requires_grad_(true);
  at::Tensor sum, normed;
  if (fused) {
    std::tie(sum, normed) = model::add_rms_norm(r, d, w, 1e-5, c.out);
  } else {
    model::RMSNorm norm(w0.size(0), 1e-5);  // the composite: normalize in F32, cast back, scale
    norm->weight = w;
    sum = r + d;
    normed = norm->forward(sum, model::KernelPolicy{}).to(c.out);
  }
  at::Tensor loss = (normed.to(at::kFloat) * up_normed).sum();
  if (use_sum) loss = loss + (sum.to(at::kFloat) * up_sum).sum();
  loss.backward();
  return {sum.detach(), normed.detach(), r.grad(), d.grad(), w.grad()};
}

const std::vector<AddNormCase>& add_norm_cases() {
  static const std::vector<AddNormCase> cases = {
      {at::kFloat, at::kFloat, at::kFloat, at::kFloat, "f32"},
      {at::kBFloat16, at::kBFloat16, at::kBFloat16, at::kBFloat16, "bf16"},
      {at::kHalf, at::kHalf, at::kHalf, at::kHalf, "f16"},
      // F32 master weights under bf16 autocast: F32 residual stream, bf16 attention/MLP output, bf16 GEMM input...
      {at::kFloat, at::kBFloat16, at::kFloat, at::kBFloat16, "mixed"},
      // ... and the final norm, which keeps F32 hidden states.
      {at::kFloat, at::kBFloat16, at::kFloat, at::kFloat, "mixed, F32 out"},
  };
  return cases;
}

TEST(FusedKernels, GpuAddRmsNormMatchesTheCompositeForwardAndBackward) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(3);
  const auto dev = at::TensorOptions().device(at::kCUDA);
  for (const AddNormCase& c : add_norm_cases()) {
    // 768 and 4096 take 16-byte vectors; 100 the scalar path. 2 x 1500 rows: several rows per backward block.
    for (const int64_t hidden : {int64_t{768}, int64_t{4096}, int64_t{100}}) {
      const at::Tensor r0 = (at::randn({2, 1500, hidden}, dev) * 3).to(c.residual);
      const at::Tensor d0 = at::randn({2, 1500, hidden}, dev).to(c.delta);
      const at::Tensor w0 = at::rand({hidden}, dev).add_(0.5).to(c.weight);
      const at::Tensor up_normed = at::randn({2, 1500, hidden}, dev);
      const at::Tensor up_sum = at::randn({2, 1500, hidden}, dev);
      ASSERT_TRUE(model::add_rms_norm_available(r0, d0, w0, c.out)) << c.name;
      for (const bool use_sum : {true, false}) {
        const auto ref = run_add_norm(false, c, r0, d0, w0, up_normed, up_sum, use_sum);
        const auto got = run_add_norm(true, c, r0, d0, w0, up_normed, up_sum, use_sum);
        const std::string what = std::string(c.name) + " H=" + std::to_string(hidden) + (use_sum ? "" : " no grad_sum");
        // The sum is one F32 add rounded once to the residual's dtype on both paths: bitwise equal.
        EXPECT_TRUE(at::equal(got.sum, ref.sum)) << what;
        ASSERT_EQ(got.normed.scalar_type(), c.out) << what;
        ASSERT_EQ(got.grad_residual.scalar_type(), c.residual) << what;
        ASSERT_EQ(got.grad_delta.scalar_type(), c.delta) << what;
        ASSERT_EQ(got.grad_weight.scalar_type(), c.weight) << what;
        // By the dtype of the result. F32: the same F32 math up to summation order and rsqrt's last bits (~1e-6
        // relative; the mixed cases' upstream gradient is the same bf16 value on both paths). Half: one rounding
        // against the composite's one or two (normalize, then scale) forward, and in the all-half cases a backward
        // the composite runs partly in half precision (a few more roundings): a few units of 2^-8 (bf16) or 2^-11
        // (fp16) relative to the largest element, the 2e-2 of the other bf16 kernel tests.
        auto tol = [](const at::Tensor& t) {
          return t.scalar_type() == at::kFloat ? 1e-5 : t.scalar_type() == at::kHalf ? 4e-3 : 2e-2;
        };
        EXPECT_LT(rel(got.normed, ref.normed), tol(ref.normed)) << what;
        EXPECT_LT(rel(got.grad_residual, ref.grad_residual), tol(ref.grad_residual)) << what;
        EXPECT_LT(rel(got.grad_delta, ref.grad_delta), tol(ref.grad_delta)) << what;
        EXPECT_LT(rel(got.grad_weight, ref.grad_weight), tol(ref.grad_weight)) << what;
      }
    }
  }
}

TEST(FusedKernels, GpuAddRmsNormBackwardIsDeterministicAndThePlainNormMatchesIt) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(4);
  const auto dev = at::TensorOptions().device(at::kCUDA);
  for (const AddNormCase& c : add_norm_cases()) {
    const at::Tensor r0 = (at::randn({4, 2048, 2048}, dev) * 3).to(c.residual);
    const at::Tensor d0 = at::randn({4, 2048, 2048}, dev).to(c.delta);
    const at::Tensor w0 = at::rand({2048}, dev).add_(0.5).to(c.weight);
    const at::Tensor up_normed = at::randn({4, 2048, 2048}, dev);
    const at::Tensor up_sum = at::randn({4, 2048, 2048}, dev);
    const auto a = run_add_norm(true, c, r0, d0, w0, up_normed, up_sum, true);
    const auto b = run_add_norm(true, c, r0, d0, w0, up_normed, up_sum, true);
    // No atomics: the weight gradient's reduction order is fixed, so two runs agree to the bit.
    EXPECT_TRUE(at::equal(a.normed, b.normed)) << c.name;
    EXPECT_TRUE(at::equal(a.grad_residual, b.grad_residual)) << c.name;
    EXPECT_TRUE(at::equal(a.grad_delta, b.grad_delta)) << c.name;
    EXPECT_TRUE(at::equal(a.grad_weight, b.grad_weight)) << c.name;
    // The norm of the stored sum alone is bitwise the fused op's (what activation checkpointing recomputes), and its
    // gradient is the fused op's without grad_sum.
    at::Tensor x = a.sum.clone().requires_grad_(true);
    at::Tensor w = w0.clone().requires_grad_(true);
    const at::Tensor plain = model::fused_rms_norm(x, w, 1e-5, c.out);
    EXPECT_TRUE(at::equal(plain, a.normed)) << c.name;
    (plain.to(at::kFloat) * up_normed).sum().backward();
    const auto no_sum = run_add_norm(true, c, r0, d0, w0, up_normed, up_sum, false);
    EXPECT_TRUE(at::equal(x.grad(), no_sum.grad_residual)) << c.name;
    EXPECT_TRUE(at::equal(w.grad(), no_sum.grad_weight)) << c.name;
  }
}

TEST(FusedKernels, GpuAddRmsNormTakesNonContiguousInputsAndFallsBackOutsideItsTypes) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  const auto dev = at::TensorOptions().device(at::kCUDA);
  const at::Tensor wide = at::randn({64, 2 * 256}, dev);
  const at::Tensor r = wide.narrow(1, 0, 256), d = wide.narrow(1, 256, 256);  // strided rows
  const at::Tensor w = at::rand({256}, dev) + 0.5;
  const auto [sum, normed] = model::add_rms_norm(r, d, w, 1e-6, at::kFloat);
  const auto [sum_c, normed_c] = model::add_rms_norm(r.contiguous(), d.contiguous(), w, 1e-6, at::kFloat);
  EXPECT_TRUE(at::equal(sum, sum_c));
  EXPECT_TRUE(at::equal(normed, normed_c));
  // bf16 residual with F32 weights, or an F32 delta into bf16: no kernel, the composite runs.
  EXPECT_FALSE(model::add_rms_norm_available(r.to(at::kBFloat16), d.to(at::kBFloat16), w, at::kBFloat16));
  EXPECT_FALSE(model::add_rms_norm_available(r, d, w, at::kBFloat16));
  EXPECT_FALSE(model::add_rms_norm_available(r.cpu(), d.cpu(), w.cpu(), at::kFloat));
}

}  // namespace
}  // namespace ft::test

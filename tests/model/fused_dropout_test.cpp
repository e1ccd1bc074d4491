// LoRA's adapter dropout through the CUDA kernel (model/lora_dropout.h): the mask is PyTorch's Philox stream of the
// device generator's (seed, offset), the backward redraws the same mask, and the model path replays it.
#include <ATen/ATen.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "fused_test_util.h"
#include "model/linear.h"
#include "model/lora_dropout.h"
#include "model/mode_guards.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

at::Generator cuda_generator() {
  return at::globalContext().defaultGenerator(at::Device(at::kCUDA, 0));
}

// The CUDA generator's (seed, Philox offset): its state tensor holds the two as 8 bytes each, in that order.
std::pair<uint64_t, uint64_t> seed_and_offset(const at::Generator& gen) {
  const at::Tensor state = gen.get_state();
  EXPECT_EQ(state.numel(), 16);
  uint64_t seed = 0, offset = 0;
  std::memcpy(&seed, state.data_ptr<uint8_t>(), 8);
  std::memcpy(&offset, state.data_ptr<uint8_t>() + 8, 8);
  return {seed, offset};
}

// dropout(h) as the kernel draws it: element i keeps when the 16-bit half (i % 2) of word (i % 8) / 2 of subsequence
// i / 8, read from `offset` on with PyTorch's own Philox engine, is below round((1 - p) 2^16).
at::Tensor expected_dropout(const at::Tensor& h, double p, uint64_t seed, uint64_t offset) {
  const at::Tensor x = h.to(at::kCPU, at::kFloat).contiguous();
  at::Tensor out = at::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const double keep = 1.0 - p;
  const auto keep_below = static_cast<uint32_t>(std::lround(std::ldexp(keep, 16)));
  const auto scale = static_cast<float>(1.0 / keep);
  for (int64_t i = 0; i < x.numel(); ++i) {
    at::philox_engine engine(seed, static_cast<uint64_t>(i / 8), offset / 4);
    uint32_t word = 0;
    for (int64_t k = 0; k <= (i % 8) / 2; ++k) word = engine();
    const uint32_t half = (word >> (16 * (i % 2))) & 0xFFFFu;
    o[i] = half < keep_below ? in[i] * scale : 0.0f;
  }
  return out.to(h.scalar_type());
}

// dropout(h) through the fused op itself: with an identity A the GEMM returns its input exactly.
at::Tensor dropped(const at::Tensor& h, double p) {
  at::NoGradGuard no_grad;
  return model::fused_lora_dropout_down(h, at::eye(h.size(1), h.options()), p);
}

TEST(FusedLoraDropout, GpuMaskIsPhiloxOfTheGeneratorsSeedAndOffsetForEveryDtypeAndAlignment) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::Generator gen = cuda_generator();
  gen.set_current_seed(1234);
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    // 40 columns: whole 16-byte vectors; 37: a tail group per call and rows that start unaligned.
    for (const int64_t cols : {40, 37}) {
      const at::Tensor h = at::randn({9, cols}, at::TensorOptions().device(at::kCUDA).dtype(dtype)) + 0.5;
      const auto [seed, offset] = seed_and_offset(gen);
      const at::Tensor out = dropped(h, 0.25);
      const auto [seed_after, offset_after] = seed_and_offset(gen);
      EXPECT_EQ(seed_after, seed);
      EXPECT_EQ(offset_after, offset + 4);  // the draws are reserved, so the next call gets new ones
      EXPECT_TRUE(at::equal(out.cpu(), expected_dropout(h, 0.25, seed, offset))) << dtype << " " << cols;
    }
  }
}

TEST(FusedLoraDropout, GpuKeepsOneMinusPOfTheElementsAndEachCallDrawsAFreshMask) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  cuda_generator().set_current_seed(5);
  const at::Tensor h = at::ones({4096, 1024}, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16));
  const double p = 0.1;
  const at::Tensor first = dropped(h, p) != 0, second = dropped(h, p) != 0;
  // 4M draws: the standard deviation of a kept fraction is 1.5e-4, of the overlap 1.9e-4.
  EXPECT_NEAR(first.to(at::kDouble).mean().item<double>(), 1.0 - p, 1e-3);
  EXPECT_NEAR(second.to(at::kDouble).mean().item<double>(), 1.0 - p, 1e-3);
  EXPECT_NEAR((first & second).to(at::kDouble).mean().item<double>(), (1.0 - p) * (1.0 - p), 1.5e-3);
  // Kept values are scaled by 1 / (1 - p), as torch.nn.Dropout does.
  const at::Tensor values = dropped(h, p).to(at::kFloat);
  const float scale = static_cast<float>(at::BFloat16(static_cast<float>(1.0 / (1.0 - p))));
  EXPECT_TRUE(((values == 0.0f) | (values == scale)).all().item<bool>());
}

// Gradients against the composite on the mask the forward drew (replayed from the same generator state): A's
// gradient is g^T dropout(h), h's is (g A) masked and scaled.
TEST(FusedLoraDropout, GpuGradientsUseTheMaskOfTheForward) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::Generator gen = cuda_generator();
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
    const double p = 0.3;
    // Never 0 (a bf16 randn + 0.5 can be): the reference reads the mask off the dropped values.
    const at::Tensor h = (at::randn({33, 64}, opts).abs() + 0.5).requires_grad_(true);
    const at::Tensor a = (at::randn({8, 64}, opts) * 0.1).requires_grad_(true);
    const at::Tensor w = at::randn({33, 8}, opts.dtype(at::kFloat));
    gen.set_current_seed(99);
    const at::Tensor down = model::fused_lora_dropout_down(h, a, p);
    (down.to(at::kFloat) * w).sum().backward();
    EXPECT_EQ(count_nodes(down, "DroppedDown"), 1);
    gen.set_current_seed(99);
    const at::Tensor hd = dropped(h.detach(), p).to(at::kFloat);
    const at::Tensor af = a.detach().to(at::kFloat);
    const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
    EXPECT_LT(rel(down.detach().to(at::kFloat), at::mm(hd, af.t())), tol) << dtype;
    EXPECT_LT(rel(a.grad().to(at::kFloat), at::mm(w.t(), hd)), tol) << dtype;
    const at::Tensor keep = (hd != 0).to(at::kFloat) / (1.0 - p);
    EXPECT_LT(rel(h.grad().to(at::kFloat), at::mm(w, af) * keep), tol) << dtype;
  }
}

// A LoRA layer in training: the fused path runs the kernel (so no mask or dropped copy is kept for backward),
// the same generator state gives the same output and gradients, and evaluation applies no dropout.
TEST(FusedLoraDropout, GpuLoraLayerTrainsWithTheKernelReplaysFromTheGeneratorAndEvaluatesWithoutDropout) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::Generator cpu = at::make_generator<at::CPUGeneratorImpl>(3);
  model::Linear layer(64, 48, false);
  {
    at::NoGradGuard g;
    layer->weight.normal_(0, 0.2, cpu);
  }
  layer->add_lora(8, 16.0, 0.2, cpu);
  {
    at::NoGradGuard g;
    layer->lora_b.normal_(0, 0.2, cpu);
  }
  layer->to(at::kCUDA);
  layer->weight.set_data(layer->weight.to(at::kBFloat16));
  layer->weight.set_requires_grad(false);
  const at::Tensor x = at::randn({2, 7, 64}, at::TensorOptions().device(at::kCUDA));
  auto run = [&](bool fused, uint64_t seed) {
    cuda_generator().set_current_seed(seed);
    layer->zero_grad();
    model::AutocastGuard autocast(at::kCUDA, at::kBFloat16, true);
    const at::Tensor y = layer->forward(x, cuda_policy(fused)).to(at::kFloat);
    if (layer->is_training()) {
      EXPECT_EQ(count_nodes(y, "DroppedDown"), fused ? 1 : 0);
      (y * at::cos(y.detach())).sum().backward();
      return std::make_pair(y.detach(), layer->lora_a.grad().clone());
    }
    return std::make_pair(y.detach(), at::Tensor());
  };
  layer->train();
  const auto [y1, g1] = run(true, 17);
  const auto [y2, g2] = run(true, 17);
  EXPECT_TRUE(at::equal(y1, y2));
  EXPECT_TRUE(at::equal(g1, g2));
  const auto [y3, g3] = run(true, 18);
  EXPECT_FALSE(at::equal(y1, y3));
  run(false, 17);  // the composite path does not use the kernel
  layer->eval();
  const auto [e_fused, unused1] = run(true, 17);
  const auto [e_plain, unused2] = run(false, 18);
  EXPECT_TRUE(at::equal(e_fused, e_plain));
}

}  // namespace
}  // namespace ft::test

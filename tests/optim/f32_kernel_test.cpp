// The F32 AdamW step's CUDA kernel (kernels/adamw_f32.h) against PyTorch's fused AdamW on the same GPU, bit for bit,
// and the amax it writes for FP8 training's casts (quant::KnownAmax). Skips itself without a GPU.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "optim/optimizer.h"
#include "optim/step_kernels.h"
#include "quant/fp8_cast.h"

namespace ft::test {
namespace {

using optim::AdamW;
using optim::AdamWOptions;

// Whether this build and machine run the F32 kernel: a CUDA device and our kernels (a build without them takes none).
bool f32_kernel_here() {
  if (!at::hasCUDA()) return false;
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  at::Tensor p = at::zeros({optim::kF32KernelMinNumel}, cuda).requires_grad_(true);
  p.mutable_grad() = at::zeros_like(p);
  optim::AdamWState s;
  s.exp_avg = at::zeros_like(p);
  s.exp_avg_sq = at::zeros_like(p);
  s.step = at::zeros({}, cuda);
  return optim::f32_kernel_takes(p, s);
}

// `values` on the GPU as a leaf F32 parameter, starting 16-byte aligned or, with `misaligned`, one element past it.
at::Tensor gpu_f32_param(const at::Tensor& values, bool misaligned) {
  const int64_t n = values.numel();
  at::Tensor storage = at::empty({n + 1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  at::Tensor p = storage.narrow(0, misaligned ? 1 : 0, n);
  p.copy_(values);
  return p.requires_grad_(true);
}

// 30 steps of the kernel (cuda_kernels) and of PyTorch's fused AdamW fed the same gradients: scaled by 1024 with
// grad_scale from step 10 on, step 20 skipped by found_inf (its gradient NaN), weight decay as given. Every tensor
// must end with the same bits; the kernel's gradient must be the one it was given.
void expect_same_bits_as_fused_adamw(int64_t n, bool misaligned, double weight_decay) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor w0 = at::randn({n}, gen) * 0.05;
  AdamWOptions opts;
  opts.lr = 3e-4;
  opts.weight_decay = weight_decay;
  opts.decay_norms_and_biases = true;
  auto fused = gpu_f32_param(w0, misaligned), kernel = gpu_f32_param(w0, misaligned);
  AdamW opt_fused({{"w", fused}}, opts);
  opts.cuda_kernels = true;
  AdamW opt_kernel({{"w", kernel}}, opts);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (int s = 0; s < 30; ++s) {
    const bool skip = s == 20, scaled = s >= 10;
    at::Tensor g = skip ? at::full({n}, NAN) : at::randn({n}, gen) * (s % 3 == 0 ? 1e-20 : 1e-2);  // some subnormal
    if (scaled) g = g * 1024.0;
    const at::Tensor scale = at::full({}, scaled ? 1024.0 : 1.0, cuda), inf = at::full({}, skip ? 1.0 : 0.0, cuda);
    fused.mutable_grad() = g.to(at::kCUDA);
    kernel.mutable_grad() = g.to(at::kCUDA);
    opt_fused.step(scale, inf);
    opt_kernel.step(scale, inf);
    if (!skip) {
      EXPECT_TRUE(at::equal(kernel.grad().cpu(), g)) << "step " << s;  // read, not written back
    }
  }
  EXPECT_TRUE(at::equal(kernel.detach().cpu(), fused.detach().cpu()));
  const auto ks = opt_kernel.state_dict(), fs = opt_fused.state_dict();
  for (const auto& [key, value] : fs) EXPECT_TRUE(at::equal(ks.at(key), value)) << key;
  EXPECT_EQ(ks.at("w.step").item<float>(), 29.0f);
  EXPECT_FALSE(at::equal(kernel.detach().cpu(), w0));
}

TEST(F32Kernel, StepsWithTheBitsOfPyTorchsFusedAdamW) {
  if (!f32_kernel_here()) GTEST_SKIP() << "no CUDA device in a build with our kernels";
  const int64_t n = optim::kF32KernelMinNumel + 3;  // large enough for the kernel; not a multiple of its groups of 4
  for (bool misaligned : {false, true}) {
    for (double weight_decay : {0.0, 0.1}) {
      SCOPED_TRACE(std::string(misaligned ? "misaligned" : "aligned") + ", weight decay " +
                   std::to_string(weight_decay));
      expect_same_bits_as_fused_adamw(n, misaligned, weight_decay);
    }
  }
}

// The amax the step writes is the new weight's max |w|, tied to the version the step left; a skipped step writes the
// unchanged weight's; an in-place change of the weight afterwards makes it describe nothing.
TEST(F32Kernel, WritesTheNewWeightsAmaxForItsVersion) {
  if (!f32_kernel_here()) GTEST_SKIP() << "no CUDA device in a build with our kernels";
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const int64_t rows = 1024, cols = 1040;
  at::Tensor w = (at::randn({rows, cols}, gen) * 0.02).to(at::kCUDA).requires_grad_(true);
  at::Tensor small = at::randn({64}, gen).to(at::kCUDA).requires_grad_(true);  // PyTorch's kernel steps it
  AdamWOptions opts;
  opts.lr = 1e-2;
  opts.cuda_kernels = true;
  AdamW opt({{"w", w}, {"small", small}}, opts);
  auto sink = std::make_shared<quant::KnownAmax>(), small_sink = std::make_shared<quant::KnownAmax>();
  opt.write_amax_into({{"w", sink}, {"small", small_sink}});
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (int s = 0; s < 3; ++s) {
    const bool skip = s == 1;
    w.mutable_grad() = skip ? at::full({rows, cols}, NAN, cuda) : at::randn({rows, cols}, gen).to(at::kCUDA);
    small.mutable_grad() = at::randn({64}, gen).to(at::kCUDA);
    const at::Tensor before = w.detach().clone();
    opt.step(std::nullopt, at::full({}, skip ? 1.0 : 0.0, cuda));
    ASSERT_TRUE(sink->of(w).defined()) << "step " << s;
    EXPECT_EQ(sink->of(w).item<float>(), w.detach().abs().max().item<float>()) << "step " << s;
    EXPECT_EQ(skip, at::equal(w.detach(), before)) << "step " << s;
  }
  EXPECT_FALSE(small_sink->of(small).defined());  // not stepped by the kernel: no amax
  {
    at::NoGradGuard no_grad;
    w.mul_(2.0);
  }
  EXPECT_FALSE(sink->of(w).defined());
}

}  // namespace
}  // namespace ft::test

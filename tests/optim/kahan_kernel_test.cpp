// The Kahan AdamW step's CUDA kernel (kernels/adamw_kahan.h) against the ATen composite on the same GPU and against
// F32 AdamW (PyTorch's fused kernel), on bf16 and fp16 parameters, aligned and not, with scaled gradients and a
// skipped step.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/optimizer.h"
#include "optim/step_kernels.h"

namespace ft::test {
namespace {

using optim::AdamW;
using optim::AdamWOptions;

bool has_cuda() {
  return at::hasCUDA();
}

// n elements of `dtype` on the GPU, starting 16-byte aligned or, with `misaligned`, one element past it.
at::Tensor gpu_param(const at::Tensor& values, at::ScalarType dtype, bool misaligned) {
  const int64_t n = values.numel();
  at::Tensor storage = at::empty({n + 1}, at::TensorOptions().dtype(dtype).device(at::kCUDA));
  at::Tensor p = storage.narrow(0, misaligned ? 1 : 0, n);
  p.copy_(values);
  return p.requires_grad_(true);
}

struct Trajectories {
  at::Tensor start, f32, kernel, kernel_compensation, aten, aten_compensation, kernel_sq, aten_sq;
};

// 300 steps at lr 1e-5 of three optimizers fed the same gradients: F32 AdamW, and the Kahan step by the kernel and by
// the ATen composite. Gradients go in scaled by 1024 with grad_scale, and step 100 is skipped by found_inf (its
// gradient NaN).
Trajectories run_trajectories(at::ScalarType dtype, int64_t n, bool misaligned) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor w0 = (at::rand({n}, gen) + 0.5).to(dtype).to(at::kFloat);  // exact in dtype
  AdamWOptions opts;
  opts.lr = 1e-5;
  opts.weight_decay = 0.1;
  opts.decay_norms_and_biases = true;
  auto f32 = w0.to(at::kCUDA).requires_grad_(true);
  auto kernel = gpu_param(w0, dtype, misaligned);
  auto aten = gpu_param(w0, dtype, misaligned);
  AdamW opt_f32({{"w", f32}}, opts);
  opts.kahan_summation = true;
  AdamW opt_aten({{"w", aten}}, opts);
  opts.cuda_kernels = true;
  AdamW opt_kernel({{"w", kernel}}, opts);
  const at::Tensor scale = at::full({}, 1024.0, at::TensorOptions().device(at::kCUDA));
  for (int s = 0; s < 300; ++s) {
    const bool skip = s == 100;
    const at::Tensor g = skip ? at::full({n}, NAN) : (at::randn({n}, gen) + 0.3).to(dtype).to(at::kFloat);
    const at::Tensor inf = at::full({}, skip ? 1.0 : 0.0, at::TensorOptions().device(at::kCUDA));
    kernel.mutable_grad() = (g * 1024.0).to(dtype).to(at::kCUDA);
    aten.mutable_grad() = (g * 1024.0).to(dtype).to(at::kCUDA);
    opt_kernel.step(scale, inf);
    opt_aten.step(scale, inf);
    if (!skip) {
      f32.mutable_grad() = g.to(at::kCUDA);
      opt_f32.step();
    }
  }
  const auto ks = opt_kernel.state_dict(), as = opt_aten.state_dict();
  EXPECT_EQ(ks.at("w.step").item<float>(), 299.0f);
  auto cpu = [](const at::Tensor& t) { return t.detach().to(at::kCPU, at::kFloat); };
  return {w0,
          cpu(f32),
          cpu(kernel),
          cpu(ks.at("w.compensation")),
          cpu(aten),
          cpu(as.at("w.compensation")),
          cpu(ks.at("w.exp_avg_sq")),
          cpu(as.at("w.exp_avg_sq"))};
}

double max_abs(const at::Tensor& t) {
  return t.abs().max().item<double>();
}

TEST(KahanKernel, FollowsTheAtenCompositeAndF32AdamW) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    for (bool misaligned : {false, true}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (misaligned ? ", misaligned" : ", aligned"));
      const Trajectories r =
          run_trajectories(dtype, 4099, misaligned);  // not a multiple of the kernel's 8-element groups
      const double moved = max_abs(r.f32 - r.start);
      ASSERT_GT(moved, 1e-3);
      // The kernel and the composite round differently only where F32 operations differ in their last bits.
      EXPECT_LT(max_abs(r.kernel_sq - r.aten_sq) / max_abs(r.aten_sq), 1e-5);
      const double mean_moved = (r.f32 - r.start).abs().mean().item<double>();
      const at::Tensor kernel_sum = r.kernel + r.kernel_compensation, aten_sum = r.aten + r.aten_compensation;
      EXPECT_LT((kernel_sum - aten_sum).abs().mean().item<double>(), 0.01 * mean_moved);
      // Both follow F32 AdamW as the CPU test of the composite requires (optimizer_test.cpp).
      EXPECT_LT((kernel_sum - r.f32).abs().mean().item<double>(), 0.06 * mean_moved);
      EXPECT_LT(max_abs(kernel_sum - r.f32), 0.25 * moved);
    }
  }
}

TEST(KahanKernel, TakesOnlyContiguousCudaHalfPrecisionParameters) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  auto opts = at::TensorOptions().device(at::kCUDA);
  auto state_like = [&](const at::Tensor& p) {
    optim::AdamWState s;
    s.exp_avg = at::zeros_like(p);
    s.exp_avg_sq = at::zeros_like(p, p.options().dtype(at::kFloat));
    s.step = at::zeros({}, opts.dtype(at::kFloat));
    s.compensation = at::zeros_like(p);
    return s;
  };
  at::Tensor p = at::zeros({4, 6}, opts.dtype(at::kBFloat16)).requires_grad_(true);
  p.mutable_grad() = at::ones_like(p);
  EXPECT_TRUE(optim::kahan_kernel_takes(p, state_like(p)));
  at::Tensor f = at::zeros({4, 6}, opts.dtype(at::kFloat)).requires_grad_(true);
  f.mutable_grad() = at::ones_like(f);
  EXPECT_FALSE(optim::kahan_kernel_takes(f, state_like(f)));
  at::Tensor cpu = at::zeros({4, 6}, at::kBFloat16).requires_grad_(true);
  cpu.mutable_grad() = at::ones_like(cpu);
  EXPECT_FALSE(optim::kahan_kernel_takes(cpu, state_like(cpu)));
  p.mutable_grad() = at::ones({6, 4}, opts.dtype(at::kBFloat16)).t();  // a transposed gradient
  EXPECT_FALSE(optim::kahan_kernel_takes(p, state_like(p)));
}

}  // namespace
}  // namespace ft::test

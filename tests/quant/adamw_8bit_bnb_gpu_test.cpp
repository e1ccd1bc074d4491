// The 8-bit-moment AdamW step's CUDA kernel against bitsandbytes' own AdamW8bit on the same GPU
// (tests/quant/ref/bnb_adamw8bit_ref.py), and the ATen composite the CPU runs against that kernel. Skips without a
// GPU or without bitsandbytes' CUDA library.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "optim/adamw_8bit.h"
#include "optim/optimizer.h"
#include "python_reference.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

// How far apart two tensors are: the fraction of equal elements and the largest difference.
struct Agreement {
  double equal_fraction, max_diff;
};
Agreement agreement(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.detach().cpu().to(at::kDouble), y = b.detach().cpu().to(at::kDouble);
  return {x.eq(y).to(at::kDouble).mean().item<double>(), (x - y).abs().max().item<double>()};
}

// The tolerance of one comparison: the least fraction of equal elements and the largest difference (parameters: in
// units in the last place of the largest value; codes: in map entries).
struct Tolerance {
  double equal_fraction, max_diff;
};

void expect_close(const at::Tensor& ours, const at::Tensor& theirs, bool codes, Tolerance tol,
                  const std::string& what) {
  SCOPED_TRACE(what);
  const Agreement a = agreement(ours, theirs);
  EXPECT_GE(a.equal_fraction, tol.equal_fraction) << a.equal_fraction;
  const double ulp = theirs.scalar_type() == at::kFloat ? std::ldexp(1.0, -23) : std::ldexp(1.0, -7);
  EXPECT_LE(a.max_diff, codes ? tol.max_diff : tol.max_diff * ulp * theirs.abs().max().item<double>()) << a.max_diff;
}

// Against bitsandbytes the kernel computes the same formulas with the same fast-math intrinsics: equal almost
// everywhere, within two ulps of the largest weight and one map entry. The composite divides and takes powers in
// IEEE arithmetic without fused multiply-adds: its weights differ by an ulp here and there (F32: in most elements
// after a few steps), and an ulp moves a moment's code where it sits on a midpoint, which a later step can carry a
// few entries among the map's fine entries near zero.
constexpr Tolerance kBnbWeights{0.999, 2}, kBnbCodes{0.999, 1}, kCompositeWeights{0.0, 2}, kCompositeCodes{0.999, 8};

TEST(AdamW8bitCuda, KernelFollowsBitsandbytesAdamW8bitAndTheCompositeFollowsTheKernel) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  constexpr int kSteps = 6;
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.995, eps = 1e-8, weight_decay = 0.01;
  uint64_t seed = 40;
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(std::string("dtype ") + c10::toString(dtype));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed++);
    const at::Tensor p0 = (at::randn({300, 257}, gen) * 0.1).to(dtype);  // 77,100 elements: a partial last block
    const at::Tensor grads =
        (at::randn({kSteps, 300, 257}, gen) * at::randn({1, 300, 1}, gen).exp()).to(dtype);  // rows of many scales
    const std::string hyper = "{\"lr\": " + std::to_string(lr) + ", \"beta1\": " + std::to_string(beta1) +
                              ", \"beta2\": " + std::to_string(beta2) +
                              ", \"eps\": 1e-8, \"weight_decay\": " + std::to_string(weight_decay) + "}";
    const PythonReference ref =
        run_python_reference("bnb_adamw8bit_ref.py", {{"param", p0}, {"grads", grads}}, {{"hyper.json", hyper}});
    if (!ref.skip_reason.empty()) GTEST_SKIP() << "bitsandbytes is not usable: " << ref.skip_reason;
    ASSERT_TRUE(ref.failure.empty()) << ref.failure;

    optim::AdamWOptions opts;
    opts.lr = lr;
    opts.beta1 = beta1;
    opts.beta2 = beta2;
    opts.eps = eps;
    opts.weight_decay = weight_decay;
    opts.eight_bit_moments = true;
    opts.cuda_kernels = true;
    auto gpu = p0.cuda().requires_grad_(true);
    auto cpu = p0.clone().requires_grad_(true);
    optim::AdamW gpu_opt({{"w", gpu}}, opts), cpu_opt({{"w", cpu}}, opts);
    for (int k = 0; k < kSteps; ++k) {
      gpu.mutable_grad() = grads[k].cuda();
      cpu.mutable_grad() = grads[k].clone();
      gpu_opt.step();
      cpu_opt.step();
      const std::string step = std::to_string(k + 1);
      expect_close(gpu, ref.tensors.at("param." + step), false, kBnbWeights, "bnb, step " + step);
      expect_close(cpu, gpu, false, kCompositeWeights, "composite, step " + step);
    }
    const auto gpu_state = gpu_opt.state_dict(), cpu_state = cpu_opt.state_dict();
    for (const std::string key : {"exp_avg", "exp_avg_sq"}) {
      expect_close(gpu_state.at("w." + key), ref.tensors.at(key), true, kBnbCodes, "bnb " + key);
      expect_close(cpu_state.at("w." + key), gpu_state.at("w." + key), true, kCompositeCodes, "composite " + key);
      const at::Tensor absmax = gpu_state.at("w." + key + ".absmax");
      EXPECT_TRUE(at::allclose(absmax, ref.tensors.at(key + ".absmax"), 1e-5, 0.0)) << key;
      EXPECT_TRUE(at::allclose(cpu_state.at("w." + key + ".absmax"), absmax, 1e-5, 0.0)) << key;
    }
  }
}

// The 8-bit step through the CUDA kernel (lr 1e-3, weight decay 0.01), with or without Kahan summation.
optim::AdamWOptions kernel_options(bool kahan) {
  optim::AdamWOptions opts;
  opts.lr = 1e-3;
  opts.weight_decay = 0.01;
  opts.eight_bit_moments = true;
  opts.kahan_summation = kahan;
  opts.cuda_kernels = true;
  return opts;
}

// What bitsandbytes has no counterpart for: the kernel's Kahan branch, its found_inf skip and its grid-stride loop
// (more than 8,192 blocks), each against the composite.
TEST(AdamW8bitCuda, KahanStepsSkippedStepsAndLongTensorsFollowTheComposite) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77);
  const at::Tensor p0 = (at::randn({2100, 1100}, gen) * 0.1).to(at::kBFloat16);  // 2,310,000 elements: 9,024 blocks
  const optim::AdamWOptions opts = kernel_options(/*kahan=*/true);
  auto gpu = p0.cuda().requires_grad_(true);
  auto cpu = p0.clone().requires_grad_(true);
  optim::AdamW gpu_opt({{"w", gpu}}, opts), cpu_opt({{"w", cpu}}, opts);
  std::map<std::string, at::Tensor> before_skip;
  for (int k = 0; k < 4; ++k) {
    const bool skip = k == 2;
    const at::Tensor g = skip ? at::full({2100, 1100}, NAN, at::kBFloat16)
                              : (at::randn({2100, 1100}, gen) * at::randn({2100, 1}, gen).exp()).to(at::kBFloat16);
    const at::Tensor found_inf = at::full({}, skip ? 1.0 : 0.0, at::kFloat);
    if (skip) before_skip = gpu_opt.state_dict();
    const at::Tensor weights_before = gpu.detach().cpu();
    gpu.mutable_grad() = g.cuda();
    cpu.mutable_grad() = g.clone();
    gpu_opt.step(std::nullopt, found_inf);
    cpu_opt.step(std::nullopt, found_inf);
    if (skip) {
      EXPECT_TRUE(at::equal(gpu.detach().cpu(), weights_before));
      for (const auto& [key, value] : gpu_opt.state_dict()) EXPECT_TRUE(at::equal(value, before_skip.at(key))) << key;
    }
    const std::string step = std::to_string(k + 1);
    expect_close(cpu, gpu, false, kCompositeWeights, "composite, step " + step);
  }
  const auto gpu_state = gpu_opt.state_dict(), cpu_state = cpu_opt.state_dict();
  EXPECT_EQ(gpu_state.at("w.step").item<float>(), 3.0f);
  // Where the two round a sum differently, the weight is an ulp apart and its compensation makes up for it: the
  // weight the pair holds, weight + compensation, follows to a small part of a weight's spacing. Where a moment's
  // code went the other way (below), the updates differ, but by less than one update (lr) over the three steps.
  const auto held = [](const std::map<std::string, at::Tensor>& state, const at::Tensor& w) {
    return w.detach().cpu().to(at::kFloat) + state.at("w.compensation").cpu().to(at::kFloat);
  };
  const double spacing = std::ldexp(1.0, -7) * p0.to(at::kFloat).abs().max().item<double>();  // bf16's at the top
  const at::Tensor held_diff = (held(gpu_state, gpu) - held(cpu_state, cpu)).abs();
  EXPECT_GE((held_diff <= spacing / 64).to(at::kDouble).mean().item<double>(), 0.995);
  EXPECT_LE(held_diff.max().item<double>(), opts.lr) << held_diff.max().item<double>();
  const at::Tensor maps = optim::eight_bit_maps(at::kCPU);
  const int64_t n = p0.numel();
  for (const auto& [index, key] : {std::pair{0, "exp_avg"}, std::pair{1, "exp_avg_sq"}}) {
    SCOPED_TRACE(key);
    const std::string k = std::string("w.") + key;
    const at::Tensor codes_cpu = cpu_state.at(k).cpu().flatten(), codes_gpu = gpu_state.at(k).cpu().flatten();
    const at::Tensor absmax_cpu = cpu_state.at(k + ".absmax").cpu(), absmax_gpu = gpu_state.at(k + ".absmax").cpu();
    // A code on a midpoint can go either way (fast-math against IEEE); where that code was its block's largest, the
    // block's absmax moves by up to a map spacing (1.4 % at most) and its other codes follow. Almost all agree...
    EXPECT_GE(codes_cpu.eq(codes_gpu).to(at::kDouble).mean().item<double>(), 0.999);
    const at::Tensor same_absmax = (absmax_cpu - absmax_gpu).abs() <= absmax_gpu.abs() * 1e-5;
    EXPECT_GE(same_absmax.to(at::kDouble).mean().item<double>(), 0.999);
    // ... and the moments they stand for differ by a few of the coarsest spacings of their block's scale at most.
    const auto moment = [&](const at::Tensor& codes, const at::Tensor& absmax) {
      return maps[index].index_select(0, codes.to(at::kLong)) *
             absmax.repeat_interleave(optim::kEightBitBlock).slice(0, 0, n);
    };
    const at::Tensor scale =
        at::maximum(absmax_cpu, absmax_gpu).repeat_interleave(optim::kEightBitBlock).slice(0, 0, n);
    const at::Tensor excess = (moment(codes_cpu, absmax_cpu) - moment(codes_gpu, absmax_gpu)).abs() - 0.05 * scale;
    EXPECT_LE(excess.max().item<double>(), 0.0)
        << "moments apart by more than 5 % of their block's absmax; blocks with another absmax: "
        << same_absmax.logical_not().sum().item<int64_t>();
  }
}

// The kernel moves a lane's 8 elements as vectors where every tensor's base is aligned, else one by one (a gradient
// can be a view into a DDP bucket at any element offset): both give the same bits, with and without Kahan.
TEST(AdamW8bitCuda, UnalignedTensorsGiveTheBitsOfAlignedOnes) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  constexpr int64_t kRows = 1000, kCols = 37, kN = kRows * kCols;  // 144.5 blocks: a partial last one
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const bool kahan : {false, true}) {
      if (kahan && dtype == at::kFloat) continue;  // F32 weights need no compensation
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (kahan ? ", Kahan" : ""));
      auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
      const at::Tensor p0 = (at::randn({kRows, kCols}, gen) * 0.1).to(dtype).cuda();
      // One element into a fresh buffer: the base is 2 or 4 bytes past an aligned address.
      const auto offset_copy = [&](const at::Tensor& x) {
        at::Tensor buffer = at::empty({kN + 1}, x.options());
        at::Tensor view = buffer.narrow(0, 1, kN).view({kRows, kCols});
        view.copy_(x);
        return view;
      };
      auto aligned = p0.clone().requires_grad_(true);
      auto offset = offset_copy(p0).requires_grad_(true);
      ASSERT_NE(reinterpret_cast<uintptr_t>(offset.data_ptr()) % 16, 0u);
      const optim::AdamWOptions opts = kernel_options(kahan);
      optim::AdamW aligned_opt({{"w", aligned}}, opts), offset_opt({{"w", offset}}, opts);
      for (int k = 0; k < 3; ++k) {
        const at::Tensor g = (at::randn({kRows, kCols}, gen) * at::randn({kRows, 1}, gen).exp()).to(dtype).cuda();
        aligned.mutable_grad() = g.clone();
        offset.mutable_grad() = offset_copy(g);
        aligned_opt.step();
        offset_opt.step();
      }
      EXPECT_TRUE(at::equal(aligned.detach().cpu(), offset.detach().cpu()));
      const auto offset_state = offset_opt.state_dict();
      for (const auto& [key, value] : aligned_opt.state_dict()) {
        EXPECT_TRUE(at::equal(value.cpu(), offset_state.at(key).cpu())) << key;
      }
    }
  }
}

}  // namespace
}  // namespace ft::test

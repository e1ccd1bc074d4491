// The fused paths against the composite ATen ops they replace: the chunked linear + cross-entropy and the grouped
// projections (CPU and GPU), RoPE, SwiGLU, the whole model and varlen flash attention over packed rows (GPU; skipped
// without CUDA). The norms: fused_norm_test.cpp.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

#include <functional>
#include <torch/csrc/autograd/function.h>

#include <set>
#include <string>

#include "model/layers.h"
#include "model/linear_cross_entropy.h"
#include "model/mode_guards.h"
#include "model/norm.h"
#include "model/rope.h"
#include "model/swiglu.h"
#include "model/transformer.h"
#include "fused_test_util.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

struct LossAndGrads {
  at::Tensor loss, dh, dw;
};

// Sum of CE and the gradients of hidden and weight, scaled by `scale`, through `fused` or the composite (with
// `softcap`, on logits soft-capped as transformers' Gemma 2 does).
LossAndGrads run_ce(bool fused, const at::Tensor& h0, const at::Tensor& w0, const at::Tensor& labels,
                    at::ScalarType cdt, int64_t chunk, double scale, double softcap = 0.0) {
  at::Tensor h = h0.clone().requires_grad_(true);
  at::Tensor w = w0.clone().requires_grad_(true);
  at::Tensor loss;
  if (fused) {
    loss = model::linear_cross_entropy_sum(h, w, labels, cdt, chunk, softcap);
  } else {
    at::Tensor logits = at::mm(h.to(cdt), w.to(cdt).t());
    if (softcap > 0.0) logits = at::tanh(logits / softcap) * softcap;
    loss = at::cross_entropy_loss(logits.to(at::kFloat), labels, {}, at::Reduction::Sum, -100);
  }
  (loss * scale).backward();
  return {loss.detach(), h.grad(), w.grad()};
}

TEST(LinearCrossEntropy, MatchesCrossEntropyOnFullLogitsWithIgnoredRows) {
  at::manual_seed(0);
  for (const auto cdt : {at::kFloat, at::kBFloat16}) {
    for (const double softcap : {0.0, 2.0}) {  // 2: Gemma 2's final soft-capping, bending these logits
      for (const int64_t chunk : {int64_t{7}, int64_t{0}}) {
        const at::Tensor h = at::randn({37, 24});
        const at::Tensor w = at::randn({101, 24}) * 0.3;
        at::Tensor labels = at::randint(0, 101, {37}, at::kLong);
        labels.index_put_({at::arange(0, 37, 5)}, -100);  // every fifth row carries no loss
        const auto ref = run_ce(false, h, w, labels, cdt, chunk, 0.37, softcap);
        const auto got = run_ce(true, h, w, labels, cdt, chunk, 0.37, softcap);
        const double tol = cdt == at::kFloat ? 1e-5 : 2e-2;
        EXPECT_LT(rel(got.loss, ref.loss), cdt == at::kFloat ? 1e-6 : 1e-3) << "chunk " << chunk << " cap " << softcap;
        EXPECT_LT(rel(got.dh, ref.dh), tol) << "chunk " << chunk << " cap " << softcap;
        EXPECT_LT(rel(got.dw, ref.dw), tol) << "chunk " << chunk << " cap " << softcap;
        EXPECT_EQ(got.dh.scalar_type(), at::kFloat);
        // Ignored rows get exactly zero gradient.
        EXPECT_EQ(got.dh.index({at::arange(0, 37, 5)}).abs().max().item<double>(), 0.0);
      }
    }
  }
}

TEST(LinearCrossEntropy, FrozenWeightGetsNoGradientAndNoGradModeComputesNone) {
  const at::Tensor h = at::randn({9, 8}).requires_grad_(true);
  const at::Tensor w = at::randn({13, 8});  // frozen, as the LM head under LoRA
  const at::Tensor labels = at::randint(0, 13, {9}, at::kLong);
  model::linear_cross_entropy_sum(h, w, labels, at::kFloat).backward();
  EXPECT_TRUE(h.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  at::NoGradGuard no_grad;
  const at::Tensor loss = model::linear_cross_entropy_sum(h, w, labels, at::kFloat);
  EXPECT_FALSE(loss.requires_grad());
}

// The fused loss against the composite on CUDA in `cdt`: `rows` x 256 hidden states, `vocab` classes, rows
// [ignored, ignored + 50) ignored, the upstream gradient `scale`, chunks of `chunk` rows.
void expect_gpu_ce_matches(at::ScalarType cdt, int64_t rows, int64_t vocab, int64_t ignored, int64_t chunk,
                           double scale, double loss_tol, double grad_tol, double softcap = 0.0) {
  const auto opts = at::TensorOptions().device(at::kCUDA);
  const at::Tensor h = at::randn({rows, 256}, opts);
  const at::Tensor w = at::randn({vocab, 256}, opts) * 0.05;
  at::Tensor labels = at::randint(0, vocab, {rows}, opts.dtype(at::kLong));
  labels.narrow(0, ignored, 50).fill_(-100);
  const auto ref = run_ce(false, h, w, labels, cdt, 0, scale, softcap);
  const auto got = run_ce(true, h, w, labels, cdt, chunk, scale, softcap);
  EXPECT_LT(rel(got.loss, ref.loss), loss_tol) << vocab << " cap " << softcap;
  EXPECT_LT(rel(got.dh, ref.dh), grad_tol) << vocab << " cap " << softcap;
  EXPECT_LT(rel(got.dw, ref.dw), grad_tol) << vocab << " cap " << softcap;
}

// On CUDA the chunk's loss and gradient come from one kernel: vectorized rows (a vocabulary that is a multiple of
// 8) and scalar ones (5003), bf16 and F32, ignored rows in the middle of a chunk.
TEST(LinearCrossEntropy, GpuBf16AndF32MatchTheCompositeAndScaleTheUpstreamGradient) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t vocab : {5003, 5120}) {
    at::manual_seed(1);
    expect_gpu_ce_matches(at::kBFloat16, 3000, vocab, 100, 700, 1.0 / 2950, 1e-3, 2e-2);
    expect_gpu_ce_matches(at::kFloat, 3000, vocab, 100, 700, 0.5, 1e-5, 1e-4);
    expect_gpu_ce_matches(at::kBFloat16, 3000, vocab, 100, 700, 1.0 / 2950, 1e-3, 2e-2, 1.0);  // Gemma 2's capping
    expect_gpu_ce_matches(at::kFloat, 3000, vocab, 100, 700, 0.5, 1e-5, 1e-4, 1.0);
  }
}

// fp16 training (dynamic loss scaling) runs the same fused loss under fp16 autocast.
TEST(LinearCrossEntropy, GpuF16MatchesTheComposite) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(2);
  expect_gpu_ce_matches(at::kHalf, 2000, 4096, 10, 600, 1024.0 / 1950, 1e-3, 1e-2);
}

// Per-row CE weighted by `row_weights` (the upstream gradient of linear_cross_entropy_rows), through `fused` or
// the composite with Reduction::None: the rows' losses and the gradients of hidden and weight.
LossAndGrads run_ce_rows(bool fused, const at::Tensor& h0, const at::Tensor& w0, const at::Tensor& labels,
                         const at::Tensor& row_weights, at::ScalarType cdt, int64_t chunk, double softcap) {
  at::Tensor h = h0.clone().requires_grad_(true);
  at::Tensor w = w0.clone().requires_grad_(true);
  at::Tensor rows;
  if (fused) {
    rows = model::linear_cross_entropy_rows(h, w, labels, cdt, chunk, softcap);
  } else {
    at::Tensor logits = at::mm(h.to(cdt), w.to(cdt).t());
    if (softcap > 0.0) logits = at::tanh(logits / softcap) * softcap;
    rows = at::cross_entropy_loss(logits.to(at::kFloat), labels, {}, at::Reduction::None, -100);
  }
  (rows * row_weights).sum().backward();
  return {rows.detach(), h.grad(), w.grad()};
}

// Per-row losses (the preference objectives sum them per sequence) with a different upstream gradient on every
// row: the hidden gradient is scaled row by row, the weight's recomputed in backward.
TEST(LinearCrossEntropyRows, MatchesPerRowCrossEntropyUnderPerRowUpstreamGradients) {
  at::manual_seed(3);
  for (const auto cdt : {at::kFloat, at::kBFloat16}) {
    for (const double softcap : {0.0, 2.0}) {
      for (const int64_t chunk : {int64_t{7}, int64_t{0}}) {
        const at::Tensor h = at::randn({37, 24});
        const at::Tensor w = at::randn({101, 24}) * 0.3;
        at::Tensor labels = at::randint(0, 101, {37}, at::kLong);
        labels.index_put_({at::arange(0, 37, 5)}, -100);
        const at::Tensor g = at::randn({37});  // signs and sizes differ per row, as -dloss/dlogp of pairs do
        const auto ref = run_ce_rows(false, h, w, labels, g, cdt, chunk, softcap);
        const auto got = run_ce_rows(true, h, w, labels, g, cdt, chunk, softcap);
        const double tol = cdt == at::kFloat ? 1e-5 : 2e-2;
        EXPECT_LT(rel(got.loss, ref.loss), cdt == at::kFloat ? 1e-6 : 1e-3) << "chunk " << chunk << " cap " << softcap;
        EXPECT_LT(rel(got.dh, ref.dh), tol) << "chunk " << chunk << " cap " << softcap;
        EXPECT_LT(rel(got.dw, ref.dw), tol) << "chunk " << chunk << " cap " << softcap;
        EXPECT_EQ(got.loss.index({at::arange(0, 37, 5)}).abs().max().item<double>(), 0.0);
      }
    }
  }
}

TEST(LinearCrossEntropyRows, GpuBf16MatchesTheComposite) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(4);
  const auto opts = at::TensorOptions().device(at::kCUDA);
  const at::Tensor h = at::randn({3000, 256}, opts);
  const at::Tensor w = at::randn({5003, 256}, opts) * 0.05;
  at::Tensor labels = at::randint(0, 5003, {3000}, opts.dtype(at::kLong));
  labels.narrow(0, 100, 50).fill_(-100);
  const at::Tensor g = at::randn({3000}, opts) / 3000;
  for (const auto cdt : {at::kBFloat16, at::kFloat}) {
    const auto ref = run_ce_rows(false, h, w, labels, g, cdt, 0, 0.0);
    const auto got = run_ce_rows(true, h, w, labels, g, cdt, 700, 0.0);
    EXPECT_LT(rel(got.loss, ref.loss), cdt == at::kFloat ? 1e-5 : 1e-3);
    EXPECT_LT(rel(got.dh, ref.dh), cdt == at::kFloat ? 1e-4 : 2e-2);
    EXPECT_LT(rel(got.dw, ref.dw), cdt == at::kFloat ? 1e-4 : 2e-2);
  }
}

struct GroupRun {
  std::vector<at::Tensor> outputs;  // per layer [B, T, out_i], F32
  std::vector<at::Tensor> grads;    // x's, then every layer's parameters in order
};

// How the group's base weights train: with gradients, frozen (LoRA), or frozen and joined into one buffer.
enum class Base { kTrainable, kFrozen, kJoined };

// q/k/v-like layers (LoRA on the first and last) through linear_group, fused or not; loss = sum(y * cos(y)). A frozen
// base is in `base_dtype` (the adapters stay F32).
GroupRun run_group(bool fused, bool autocast, at::Device device, bool bias, double dropout,
                   Base base = Base::kTrainable, at::ScalarType base_dtype = at::kFloat) {
  at::manual_seed(7);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  std::vector<model::Linear> layers = {model::Linear(48, 64, bias), model::Linear(48, 16, bias),
                                       model::Linear(48, 16, bias)};
  for (auto& l : layers) {
    at::NoGradGuard g;
    l->weight.normal_(0, 0.2);
    if (bias) l->bias.normal_(0, 0.2);
  }
  layers[0]->add_lora(4, 8.0, dropout, gen);
  layers[2]->add_lora(4, 8.0, dropout, gen);
  for (auto& l : layers) {
    at::NoGradGuard g;
    if (l->has_lora()) l->lora_b.normal_(0, 0.2);
    l->to(device);
    if (base == Base::kTrainable) continue;
    l->weight.set_data(l->weight.to(base_dtype));
    l->weight.set_requires_grad(false);
    if (bias) l->bias.set_data(l->bias.to(base_dtype));
    if (bias) l->bias.set_requires_grad(false);
  }
  at::Tensor x = at::randn({2, 5, 48}).to(device).requires_grad_(true);
  std::vector<model::LinearImpl*> ptrs;
  for (auto& l : layers) ptrs.push_back(l.get());
  if (base == Base::kJoined) {
    EXPECT_TRUE(model::join_frozen_weights(ptrs));
    for (size_t i = 1; i < ptrs.size(); ++i) {
      EXPECT_TRUE(ptrs[i]->weight.storage().is_alias_of(ptrs[0]->weight.storage()));
      EXPECT_TRUE(ptrs[i]->named_parameters()["weight"].is_same(ptrs[i]->weight));
    }
  }
  GroupRun run;
  at::Tensor loss = at::zeros({}, at::TensorOptions().device(device));
  {
    std::unique_ptr<model::AutocastGuard> guard;
    if (autocast) guard = std::make_unique<model::AutocastGuard>(device.type(), at::kBFloat16, true);
    at::manual_seed(11);
    // The grouped GEMMs on either device (on CUDA, the rest of the run's fused paths as well).
    model::KernelPolicy policy = model::KernelPolicy::resolve(fused, device, at::kBFloat16);
    policy.group_gemms = fused;
    for (const at::Tensor& y : model::linear_group(x, ptrs, policy).outputs) {
      const at::Tensor yf = y.to(at::kFloat);
      run.outputs.push_back(yf.detach());
      loss = loss + (yf * at::cos(yf.detach())).sum();
    }
  }
  loss.backward();
  run.grads.push_back(x.grad());
  for (auto& l : layers) {
    for (const auto& p : l->parameters()) {
      if (p.requires_grad()) run.grads.push_back(p.grad());
    }
  }
  return run;
}

void expect_group_match(const GroupRun& fused, const GroupRun& plain, double tol) {
  ASSERT_EQ(fused.outputs.size(), plain.outputs.size());
  for (size_t i = 0; i < plain.outputs.size(); ++i) EXPECT_LT(rel(fused.outputs[i], plain.outputs[i]), tol) << i;
  ASSERT_EQ(fused.grads.size(), plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    ASSERT_TRUE(fused.grads[i].defined() && plain.grads[i].defined()) << i;
    EXPECT_LT(rel(fused.grads[i], plain.grads[i]), tol) << "gradient " << i;
  }
}

TEST(LinearGroup, OneGemmGivesEachLayersOutputAndGradientsWithAdaptersAndBias) {
  for (const bool bias : {false, true}) {
    // F32 weights and no autocast: the layers share the input, with one GEMM over the adapters' A.
    expect_group_match(run_group(true, false, at::kCPU, bias, 0.0), run_group(false, false, at::kCPU, bias, 0.0),
                       1e-5);
    // F32 weights under bf16 autocast: one GEMM over the concatenated bf16 weights; bf16 rounding apart.
    expect_group_match(run_group(true, true, at::kCPU, bias, 0.0), run_group(false, true, at::kCPU, bias, 0.0), 2e-2);
  }
}

TEST(LinearGroup, AdapterDropoutDrawsOneMaskPerLayerAsTheSeparateLayersDo) {
  // In training each adapter draws its own dropout mask, in layer order as the separate layers do, so the same seed
  // gives the same masks and both paths agree.
  expect_group_match(run_group(true, false, at::kCPU, true, 0.1), run_group(false, false, at::kCPU, true, 0.1), 1e-5);
}

// How many autograd nodes reachable from `root` have a name containing `kind`.
int count_autograd_nodes(const std::shared_ptr<torch::autograd::Node>& root, const std::string& kind) {
  int found = 0;
  std::vector<torch::autograd::Node*> todo = {root.get()};
  std::set<torch::autograd::Node*> seen;
  while (!todo.empty()) {
    torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    found += n->name().find(kind) != std::string::npos ? 1 : 0;
    for (const auto& edge : n->next_edges()) todo.push_back(edge.function.get());
  }
  return found;
}

// The adapter adds into the base output in place; on a view that would make autograd's CopySlices copy the whole
// output gradient three times per layer in the backward (5.8 % of an 8B LoRA step on an H200).
TEST(LinearGroup, AdaptersAddIntoTheBaseOutputWithoutCopySlices) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  model::Linear single(48, 64, false);
  single->add_lora(4, 8.0, 0.0, gen);
  const at::Tensor x = at::randn({2, 5, 48}).requires_grad_(true);
  const at::Tensor y = single->forward(x, model::KernelPolicy{});
  EXPECT_GT(count_autograd_nodes(y.grad_fn(), "AddmmBackward"), 0);  // the walk sees the adapter's GEMM
  EXPECT_EQ(count_autograd_nodes(y.grad_fn(), "CopySlices"), 0);
  model::KernelPolicy grouped;
  grouped.group_gemms = true;
  for (const bool autocast : {false, true}) {
    std::vector<model::Linear> layers = {model::Linear(48, 64, false), model::Linear(48, 16, false)};
    layers[0]->add_lora(4, 8.0, 0.0, gen);
    std::unique_ptr<model::AutocastGuard> guard;
    if (autocast) guard = std::make_unique<model::AutocastGuard>(at::kCPU, at::kBFloat16, true);
    const auto out = model::linear_group(x, {layers[0].get(), layers[1].get()}, grouped).outputs;
    EXPECT_EQ(count_autograd_nodes(out[0].grad_fn(), "CopySlices"), 0) << autocast;
  }
}

// A frozen base (LoRA) joined into one weight buffer runs as one GEMM per direction and still gives each layer's
// output and the same input and adapter gradients.
TEST(LinearGroup, FrozenWeightsJoinedIntoOneBufferGiveTheSameOutputsAndGradients) {
  for (const bool bias : {false, true}) {
    for (const double dropout : {0.0, 0.1}) {
      const GroupRun plain = run_group(false, false, at::kCPU, bias, dropout, Base::kFrozen);
      expect_group_match(run_group(true, false, at::kCPU, bias, dropout, Base::kJoined), plain, 1e-5);
      expect_group_match(run_group(true, false, at::kCPU, bias, dropout, Base::kFrozen), plain, 1e-5);
    }
  }
  std::vector<model::Linear> layers = {model::Linear(8, 4, false), model::Linear(8, 2, false)};
  std::vector<model::LinearImpl*> ptrs = {layers[0].get(), layers[1].get()};
  for (auto* l : ptrs) {
    at::NoGradGuard g;
    l->weight.normal_();  // a Linear starts uninitialised, and NaN garbage would fail the comparison below
  }
  const at::Tensor x = at::randn({3, 8});
  EXPECT_FALSE(model::join_frozen_weights(ptrs));  // trainable weights stay apart
  model::KernelPolicy grouped;
  grouped.group_gemms = true;
  EXPECT_FALSE(model::linear_group(x, ptrs, grouped).joint.defined());
  for (auto* l : ptrs) l->weight.set_requires_grad(false);
  const at::Tensor before = at::cat({layers[0]->weight, layers[1]->weight});
  ASSERT_TRUE(model::join_frozen_weights(ptrs));
  EXPECT_TRUE(at::equal(at::cat({layers[0]->weight, layers[1]->weight}), before));
  EXPECT_TRUE(model::linear_group(x, ptrs, grouped).joint.defined());  // one GEMM
  model::Linear other(6, 2, false);
  other->weight.set_requires_grad(false);
  EXPECT_FALSE(model::join_frozen_weights({layers[0].get(), other.get()}));  // input sizes differ
}

// Without adapter dropout: on CUDA the group draws its masks over the input already cast to bf16, a separate layer
// over the F32 input autocast will cast, and CUDA's dropout lays out its random numbers by dtype, so the masks differ
// (the CPU tests above check that both draw one mask per layer, in layer order).
TEST(LinearGroup, GpuBf16FrozenJoinedBaseUnderAutocastMatchesSeparateLayers) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  const GroupRun plain = run_group(false, true, at::kCUDA, true, 0.0, Base::kFrozen, at::kBFloat16);
  expect_group_match(run_group(true, true, at::kCUDA, true, 0.0, Base::kJoined, at::kBFloat16), plain, 2e-2);
}

TEST(LinearGroup, GpuBf16AutocastMatchesSeparateLayers) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  expect_group_match(run_group(true, true, at::kCUDA, true, 0.0), run_group(false, true, at::kCUDA, true, 0.0), 2e-2);
}

TEST(FusedKernels, GpuFusedRopeMatchesTheCompositeForwardAndBackward) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
    const at::Tensor x0 = at::randn({3, 17, 5, 64}, opts);
    const at::Tensor angle = at::rand({3, 17, 32}, opts.dtype(at::kFloat)) * 6.28;
    const at::Tensor emb = at::cat({angle, angle}, -1);
    const at::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);
    ASSERT_TRUE(model::fused_rope_available(x0, cos));
    const at::Tensor up = at::randn_like(x0);
    auto run = [&](bool fused) {
      at::Tensor x = x0.clone().requires_grad_(true);
      at::Tensor y = fused ? model::fused_rope_apply(x, cos, sin) : model::apply_rotary(x, cos, sin);
      (y.to(at::kFloat) * up.to(at::kFloat)).sum().backward();
      return std::make_pair(y.detach(), x.grad());
    };
    const auto [y0, g0] = run(false);
    const auto [y1, g1] = run(true);
    const double tol = dtype == at::kFloat ? 1e-6 : 1e-2;
    EXPECT_LT(rel(y1, y0), tol);
    EXPECT_LT(rel(g1, g0), tol);
  }
}

TEST(FusedKernels, GpuFusedRopeReadsASliceOfAFusedProjectionInPlace) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor qkv = at::randn({2, 9, 3 * 4 * 64}, opts);
  const at::Tensor k = qkv.narrow(-1, 4 * 64, 4 * 64).view({2, 9, 4, 64});  // rows strided by 3 * 4 * 64
  ASSERT_FALSE(k.is_contiguous());
  const at::Tensor angle = at::rand({2, 9, 32}, opts.dtype(at::kFloat)) * 6.28;
  const at::Tensor emb = at::cat({angle, angle}, -1);
  const at::Tensor cos = emb.cos().to(at::kBFloat16), sin = emb.sin().to(at::kBFloat16);
  EXPECT_TRUE(at::equal(model::fused_rope_apply(k, cos, sin), model::fused_rope_apply(k.contiguous(), cos, sin)));
}

// SwiGLU, and with gelu Gemma's GeGLU (gelu_pytorch_tanh).
TEST(FusedKernels, GpuSwigluAndGegluMatchTheCompositeOnPairsAndJointOutputs) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  for (const bool gelu : {false, true}) {
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      for (const int64_t cols : {64, 37}) {  // vectorized and scalar widths
        const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
        const at::Tensor gu0 = at::randn({3 * 7, 2 * cols}, opts) * 3;
        const at::Tensor up_grad = at::randn({3 * 7, cols}, opts);
        auto run = [&](int variant) {  // 0 composite, 1 pair of strided halves, 2 joint
          at::Tensor gu = gu0.clone().requires_grad_(true);
          const at::Tensor g = gu.narrow(1, 0, cols), u = gu.narrow(1, cols, cols);
          at::Tensor y = variant == 0   ? (gelu ? at::gelu(g, "tanh") : at::silu(g)) * u
                         : variant == 1 ? model::fused_swiglu(g, u, gelu)
                                        : model::fused_swiglu_joint(gu, gelu);
          (y.to(at::kFloat) * up_grad.to(at::kFloat)).sum().backward();
          return std::make_pair(y.detach(), gu.grad());
        };
        const auto [y0, g0] = run(0);
        // F32 GeGLU: the kernels build with --use_fast_math, so tanhf is the hardware approximation; its gradient
        // differed by up to 1.4e-5 of the largest (40 random draws on an H200), more than SwiGLU's 1e-5.
        const double tol = dtype == at::kFloat ? (gelu ? 5e-5 : 1e-5) : 1.6e-2;
        for (const int variant : {1, 2}) {
          const auto [y, g] = run(variant);
          EXPECT_LT(rel(y, y0), tol) << "variant " << variant << " cols " << cols << " gelu " << gelu;
          EXPECT_LT(rel(g, g0), tol) << "variant " << variant << " cols " << cols << " gelu " << gelu;
        }
      }
    }
  }
}

// A model of `a` on the GPU with N(0, 0.05) weights from `seed`: F32, or with `lora` a bf16 base whose linear weights
// (and with `freeze_embeddings` every other base tensor) are frozen, with rank-8 adapters of random B.
std::shared_ptr<model::Transformer> random_gpu_model(const model::ModelArgs& a, uint64_t seed, bool lora,
                                                    bool freeze_embeddings, double lora_dropout = 0.0) {
  at::manual_seed(seed);
  auto model = std::make_shared<model::Transformer>(a);
  for (auto& p : model->parameters()) {
    at::NoGradGuard g;
    p.normal_(0, 0.05);
  }
  model->to(at::kCUDA, lora ? at::kBFloat16 : at::kFloat);
  if (!lora) return model;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(9);
  if (freeze_embeddings) {
    for (auto& p : model->parameters()) p.requires_grad_(false);
  }
  for (const auto& m : model->modules()) {
    if (auto* l = m->as<model::LinearImpl>()) {
      l->weight.requires_grad_(false);
      l->add_lora(8, 16.0, lora_dropout, gen);
      at::NoGradGuard g;
      l->lora_b.normal_(0, 0.05);
    }
  }
  return model;
}

// A whole model, forward and backward, with train.fused_kernels on and off: F32 weights under bf16 autocast (one GEMM
// over concatenated weights, the joint SwiGLU) and a bf16 base with LoRA (shared input, per-layer GEMMs).
// Under bf16 autocast: the logits of `ids` (as F32, handed to `check` first) and the gradients of every trainable
// parameter for the loss sum(logits * cos(logits)).
std::pair<at::Tensor, std::vector<at::Tensor>> logits_and_grads(
    model::Transformer& model, const at::Tensor& ids, const std::function<void(const at::Tensor&)>& check = {}) {
  model.zero_grad();
  model::AutocastGuard autocast(c10::kCUDA, at::kBFloat16, true);
  const at::Tensor logits = model.forward(ids).to(at::kFloat);
  if (check) check(logits);
  (logits * at::cos(logits.detach())).sum().backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : model.parameters()) {
    if (p.requires_grad()) grads.push_back(p.grad().clone());
  }
  return {logits.detach(), grads};
}

// Llama; Gemma 3 with its (1 + w) norms (q/k norms too), GeGLU, a sliding and a global layer, final soft-capping;
// Gemma 2 with attention soft-capping (the fused path's kernel under a dense window mask and under plain causality).
TEST(FusedKernels, GpuModelGradientsMatchTheAtenPath) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  for (const std::string family : {"llama", "gemma3_text", "gemma2"}) {
    const bool gemma = family != "llama";
    for (const bool lora : {false, true}) {
      model::ModelArgs a;
      a.vocab_size = 101;
      a.hidden_size = 128;
      a.intermediate_size = 320;
      a.num_layers = 2;
      a.num_heads = 4;
      a.num_kv_heads = 2;
      a.head_dim = 32;
      a.attention_bias = true;
      a.max_position_embeddings = 64;
      if (gemma) {
        a.model_type = family;
        a.gemma = true;
        a.qk_norm = family == "gemma3_text";
        a.hidden_act = "gelu_pytorch_tanh";
        a.query_pre_attn_scalar = 24.0;
        a.sliding_window = 16;
        a.sliding_layers = {true, false};
        if (family == "gemma3_text") a.local_rope_theta = 100.0;
        if (family == "gemma2") a.attn_logit_softcapping = 1.5;  // small, so the random scores bend
        a.final_logit_softcapping = 5.0;
      }
      auto model = random_gpu_model(a, 5, lora, /*freeze_embeddings=*/false);
      const at::Tensor ids = at::randint(0, 101, {2, 48}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
      auto run = [&](bool fused) {
        model->set_kernel_policy(cuda_policy(fused));
        return logits_and_grads(*model, ids, [&](const at::Tensor& logits) {
          // Fused: every norm through model/norm.h's kernel, all but the first input norm with its residual add.
          // Gemma's norms of layer outputs and heads (4 more per layer) take it when their weights have the input's
          // dtype (bf16 base); with F32 weights under autocast they stay composite.
          const int64_t per_layer = a.qk_norm ? 4 : 2;
          const int64_t norms = 2 * a.num_layers + 1 + (gemma && lora ? per_layer * a.num_layers : 0);
          EXPECT_EQ(count_nodes(logits, "AddRmsNorm"), fused ? norms : 0) << (lora ? "lora " : "full ") << family;
          const int64_t capped = fused && a.attn_logit_softcapping ? a.num_layers : 0;
          EXPECT_EQ(count_nodes(logits, "SoftcapAttention"), capped) << (lora ? "lora " : "full ") << family;
        });
      };
      const auto [l0, g0] = run(false);
      const auto [l1, g1] = run(true);
      EXPECT_LT(rel(l1, l0), 2e-2) << (lora ? "lora " : "full ") << family;
      ASSERT_EQ(g0.size(), g1.size());
      for (size_t i = 0; i < g0.size(); ++i) {
        EXPECT_LT(rel(g1[i], g0[i]), 5e-2) << (lora ? "lora " : "full ") << i << " " << family;
      }
    }
  }
}

// Activation checkpointing over the fused path: the checkpointed layer keeps only its input h = residual + pending
// and recomputes the norm of h alone, which gives the bits of the forward's fused add + norm; the logits are bitwise
// those without checkpointing, and the gradients agree up to where the residual-stream gradient is added (inside
// the kernel, or by autograd after it: one F32 rounding apart, which can move a bf16 rounding downstream).
TEST(FusedKernels, GpuCheckpointedLayersRecomputeTheFusedForward) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  // With adapter dropout the recompute replays the forward's masks (the kernel draws from the restored generator).
  for (const auto& [lora, dropout] : {std::pair{false, 0.0}, std::pair{true, 0.0}, std::pair{true, 0.1}}) {
    model::ModelArgs a;
    a.vocab_size = 101;
    a.hidden_size = 256;
    a.intermediate_size = 512;
    a.num_layers = 3;
    a.num_heads = 4;
    a.num_kv_heads = 2;
    a.head_dim = 64;
    a.max_position_embeddings = 64;
    auto model = random_gpu_model(a, 6, lora, /*freeze_embeddings=*/true, dropout);
    model->set_kernel_policy(cuda_policy(true));
    const at::Tensor ids = at::randint(0, 101, {2, 48}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
    auto run = [&](bool ckpt) {
      model->set_activation_checkpointing(ckpt);
      at::manual_seed(23);
      return logits_and_grads(*model, ids);
    };
    const auto [l0, g0] = run(false);
    const auto [l1, g1] = run(true);
    EXPECT_TRUE(at::equal(l0, l1)) << (lora ? "lora " : "full ") << dropout;
    ASSERT_EQ(g0.size(), g1.size());
    for (size_t i = 0; i < g0.size(); ++i) {
      EXPECT_LT(rel(g1[i], g0[i]), 2e-2) << (lora ? "lora " : "full ") << dropout << " " << i;
    }
  }
}

// model.activation_offload: the checkpointed layer inputs go to pinned host memory during the forward (a side
// stream) and come back in backward (prefetched one layer ahead). The values are the same bits, so the logits equal
// checkpointing on the device bit for bit and the gradients agree up to the backward's own run-to-run spread (the
// attention backward adds with atomics: two runs without offload differ in the last bits too); a layer input read
// before its copy arrived, or from the wrong slot, would move them by O(1). The offloaded run goes first, so no
// earlier identical run has left the same values in a reused block.
// Memory: the peak over forward and backward, with the GPU held back by a sleep queued first, so the CPU queues the
// forward far ahead of the GPU (as in training with large layers, where the caching allocator's bookkeeping by the
// CPU's clock once kept every offloaded input counted until the forward's end).
TEST(FusedKernels, GpuOffloadedCheckpointsGiveTheSameBitsAndHoldLessMemory) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  model::ModelArgs a;
  a.vocab_size = 101;
  a.hidden_size = 256;
  a.intermediate_size = 512;
  a.num_layers = 8;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 64;
  a.max_position_embeddings = 1024;
  constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  for (bool lora : {false, true}) {
    auto model = random_gpu_model(a, 7, lora, /*freeze_embeddings=*/true, lora ? 0.1 : 0.0);
    model->set_kernel_policy(cuda_policy(true));
    model->set_activation_checkpointing(true);
    const at::Tensor ids = at::randint(0, 101, {4, 1000}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
    auto run = [&](bool offload) {
      model->set_activation_offload(offload);
      at::manual_seed(29);
      return logits_and_grads(*model, ids);
    };
    auto peak_bytes = [&](bool offload) {  // above what was allocated before the step
      model->set_activation_offload(offload);
      c10::cuda::device_synchronize();
      c10::cuda::CUDACachingAllocator::emptyCache();
      c10::cuda::CUDACachingAllocator::resetPeakStats(0);
      const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[kAggregate].current;
      at::cuda::sleep(200'000'000);  // ~0.1 s of GPU time: the CPU queues the whole forward meanwhile
      at::manual_seed(29);
      logits_and_grads(*model, ids);
      c10::cuda::device_synchronize();
      return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[kAggregate].peak - before;
    };
    const auto [l1, g1] = run(true);
    const auto [l0, g0] = run(false);
    EXPECT_TRUE(at::equal(l0, l1)) << (lora ? "lora" : "full") << ": logits differ by "
                                   << (l0 - l1).abs().max().item<float>();
    ASSERT_EQ(g0.size(), g1.size());
    for (size_t i = 0; i < g0.size(); ++i) EXPECT_LT(rel(g1[i], g0[i]), 1e-2) << (lora ? "lora " : "full ") << i;
    // Each layer input is [4, 1000, 256] in the residual stream's dtype.
    const int64_t input_bytes = 4 * 1000 * 256 * (lora ? 2 : 4);
    const int64_t on_device = peak_bytes(false), offloaded = peak_bytes(true);
    // LoRA: the peak is at the backward's start, which offloaded holds at most the kInFlight inputs whose copies
    // were pending at the forward's end, the last layer's input copied back and the layer before's prefetched;
    // without, all eight. Full fine-tune: the weights' F32 gradients grow through the backward, so the peak may come
    // late, when the run without offload has freed most inputs too: at least one input less.
    const auto kept = static_cast<int64_t>(model::OffloadChain::kInFlight) + 2;
    const int64_t saved = lora ? (a.num_layers - kept - 1) * input_bytes : input_bytes;
    EXPECT_LE(offloaded, on_device - saved) << (lora ? "lora" : "full") << ": peak " << on_device
                                            << " bytes with the inputs on the device, offloaded " << offloaded;
  }
}

// Packed rows through varlen flash attention: each sample's logits and gradients are those of the sample run alone
// (attention never crosses a sample boundary), and match the dense block-mask path.
// A 2-layer Llama of hidden 128 for the attention tests; window > 0: a sliding window of that many positions.
model::ModelArgs attention_test_args(int64_t window, int64_t head_dim = 32) {
  model::ModelArgs a;
  if (window > 0) a.sliding_window = window;
  a.vocab_size = 97;
  a.hidden_size = 128;
  a.intermediate_size = 256;
  a.num_layers = 2;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = head_dim;
  a.max_position_embeddings = 256;
  return a;
}

// window 0: full causal attention within each sample; otherwise a sliding window shorter than the samples. Pieces of
// <= 64 tokens with heads of 64 take our short-piece kernel (`kernel`), the others varlen flash attention.
void check_packed_rows(int64_t window, int64_t head_dim, const std::string& kernel) {
  auto model = std::make_shared<model::Transformer>(attention_test_args(window, head_dim));
  for (auto& p : model->parameters()) {
    at::NoGradGuard g;
    p.normal_(0, 0.05);
  }
  model->to(at::kCUDA, at::kBFloat16);
  model->set_kernel_policy(cuda_policy(true));
  // Two rows of 64 tokens: [20, 30, 14 padding] and [64].
  const std::vector<int64_t> lens = {20, 30, 14, 64};
  const auto opts = at::TensorOptions().device(at::kCUDA);
  const at::Tensor ids = at::randint(0, 97, {2, 64}, opts.dtype(at::kLong));
  at::Tensor pos = at::empty({2, 64}, at::kLong), seg = at::empty({2, 64}, at::kInt);
  std::vector<int32_t> cu{0};
  int64_t row = 0, col = 0, piece = 0;
  for (int64_t len : lens) {
    for (int64_t t = 0; t < len; ++t) {
      pos[row][col + t] = t;
      seg[row][col + t] = static_cast<int32_t>(piece);
    }
    cu.push_back(cu.back() + static_cast<int32_t>(len));
    col += len;
    ++piece;
    if (col == 64) {
      ++row;
      col = 0;
      piece = 0;
    }
  }
  model::PackedPieces packed{at::tensor(cu, at::kInt).to(at::kCUDA), 64};
  const at::Tensor varlen = model->forward(ids, pos.to(at::kCUDA), seg.to(at::kCUDA), nullptr, &packed);
  const std::string other = kernel == "FlashAttention" ? "ShortPieceAttention" : "FlashAttention";
  EXPECT_GT(count_nodes(varlen, kernel), 0) << kernel;
  EXPECT_EQ(count_nodes(varlen, other), 0) << other;
  model->set_kernel_policy(cuda_policy(false));
  const at::Tensor dense = model->forward(ids, pos.to(at::kCUDA), seg.to(at::kCUDA));
  EXPECT_LT(rel(varlen.to(at::kFloat), dense.to(at::kFloat)), 3e-2);
  // The second sample of row 0 alone.
  const at::Tensor alone = model->forward(ids.narrow(1, 20, 30).narrow(0, 0, 1));
  EXPECT_LT(rel(varlen.narrow(1, 20, 30).narrow(0, 0, 1).to(at::kFloat), alone.to(at::kFloat)), 3e-2);
}

TEST(FusedKernels, GpuPackedRowsNeverAttendAcrossSamples) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  check_packed_rows(0, 32, "FlashAttention");
}

TEST(FusedKernels, GpuPackedShortPiecesTakeTheShortPieceKernelAndNeverAttendAcrossSamples) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  check_packed_rows(0, 64, "ShortPieceAttention");
}

TEST(FusedKernels, GpuPackedRowsWithASlidingWindowMatchTheDenseWindowMask) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  check_packed_rows(16, 64, "FlashAttention");  // a window shorter than the pieces: varlen
}

// Unpacked rows with a window shorter than them (Mistral, Gemma's sliding layers): on the fused path each row is one
// piece of varlen flash attention with the window; forward and gradients as the dense window mask gives them, and
// decoding with a KV cache keeps the mask path.
TEST(FusedKernels, GpuUnpackedRowsWithASlidingWindowTakeFlashAttention) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  auto model = random_gpu_model(attention_test_args(16), 6, /*lora=*/false, /*freeze_embeddings=*/false);
  const at::Tensor ids = at::randint(0, 97, {3, 64}, at::TensorOptions().device(at::kCUDA).dtype(at::kLong));
  auto run = [&](bool fused) {
    model->set_kernel_policy(cuda_policy(fused));
    return logits_and_grads(*model, ids, [&](const at::Tensor& logits) {
      EXPECT_EQ(count_nodes(logits, "FlashAttention") > 0, fused) << (fused ? "fused" : "dense");
    });
  };
  const auto [dense, g0] = run(false);
  const auto [flash, g1] = run(true);
  EXPECT_LT(rel(flash, dense), 2e-2);
  for (size_t i = 0; i < g0.size(); ++i) EXPECT_LT(rel(g1[i], g0[i]), 5e-2) << i;
  EXPECT_NE(model->kernel_summary(false).find("through varlen flash attention"), std::string::npos);
}

}  // namespace
}  // namespace ft::test

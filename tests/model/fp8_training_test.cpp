// FP8 training's linear (train.fp8, model/fp8_training.h): on the CPU, the forward is the cast-then-GEMM definition
// of quant/fp8_cast.h; on a GPU (skipped without one, or before sm_89), our cast kernels equal the ATen casts bit for
// bit and the _scaled_mm path agrees with the F32 reference GEMMs forward and backward. torchao's numbers are the
// reference of tests/quant/fp8_training_torchao_test.cpp.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "model/fp8_training.h"
#include "model/kernel_policy.h"
#include "model/layers.h"
#include "model/linear.h"
#include "model/mode_guards.h"
#include "model/swiglu.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "quant/fp8_cast.h"
#include "support/tensor_bits.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

using quant::Fp8Format;

at::Tensor random_bf16(std::vector<int64_t> shape, uint64_t seed, double std) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor spread = at::randn(shape, gen, at::kFloat).mul(0.7).exp();  // heavy tails set the scales
  return (at::randn(shape, gen, at::kFloat) * spread * std).to(at::kBFloat16);
}

TEST(Fp8Training, ForwardIsTheCastThenScaledGemmDefinition) {
  const at::Tensor x = random_bf16({24, 64}, 1, 1.0), w = random_bf16({48, 64}, 2, 0.05);
  const at::Tensor y_tw = model::fp8_training_linear(x, w, Fp8Training::kTensorwise, model::KernelPolicy{});
  EXPECT_TRUE(bits_equal(
      y_tw, quant::fp8_scaled_gemm_reference(quant::cast_fp8_tensorwise(x, Fp8Format::kE4m3),
                                             quant::cast_fp8_tensorwise(w, Fp8Format::kE4m3), at::kBFloat16)));
  const at::Tensor y_rw = model::fp8_training_linear(x.view({4, 6, 64}), w, Fp8Training::kRowwise, {});
  EXPECT_EQ(y_rw.sizes(), (std::vector<int64_t>{4, 6, 48}));
  EXPECT_TRUE(
      bits_equal(y_rw.reshape({24, 48}),
                 quant::fp8_scaled_gemm_reference(quant::cast_fp8_rowwise(x, Fp8Format::kE4m3, true),
                                                  quant::cast_fp8_rowwise(w, Fp8Format::kE4m3, true), at::kBFloat16)));
}

// A tiny decoder for the projection-selection tests: hidden 32, q 2 x 16, k/v 1 x 16 (16 outputs each).
model::ModelArgs selection_args(int64_t intermediate, int64_t layers) {
  model::ModelArgs a;
  a.vocab_size = 32;
  a.hidden_size = 32;
  a.intermediate_size = intermediate;
  a.num_layers = layers;
  a.num_heads = 2;
  a.num_kv_heads = 1;
  a.head_dim = 16;
  return a;
}

// train.fp8_edge_layers: the first and last `edge` layers keep bf16 GEMMs, train.fp8_skip and the size rule apply to
// the rest, and only those are reported back (the edge layers are logged by number).
TEST(Fp8Training, EdgeLayersAndSkippedProjectionsStayBf16) {
  const model::ModelArgs a = selection_args(/*intermediate=*/40, /*layers=*/5);  // 40: MLP stays bf16 by size
  EXPECT_EQ(model::fp8_edge_layers(5, 1), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(model::fp8_edge_layers(5, 2), (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(model::fp8_edge_layers(3, 2), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(model::fp8_edge_layers(5, 0).empty());

  model::Transformer m(a);
  const auto left = model::enable_fp8_training(m, Fp8Training::kTensorwise, {{"layers.2.self_attn.o_proj"}, 1, 0});
  std::vector<std::string> expected_left, in_fp8;
  for (const int layer : {1, 2, 3}) {
    const std::string base = "model.layers." + std::to_string(layer) + ".";
    if (layer == 2) expected_left.push_back(base + "self_attn.o_proj");
    for (const char* mlp : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) expected_left.push_back(base + mlp);
  }
  std::sort(expected_left.begin(), expected_left.end());
  std::vector<std::string> sorted_left = left;
  std::sort(sorted_left.begin(), sorted_left.end());
  EXPECT_EQ(sorted_left, expected_left);
  for (const auto& [path, lin] : m.projections()) {
    if (lin->fp8_training != Fp8Training::kOff) in_fp8.push_back(path);
  }
  const std::vector<std::string> expected_fp8 = {
      "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.k_proj", "model.layers.1.self_attn.v_proj",
      "model.layers.1.self_attn.o_proj", "model.layers.2.self_attn.q_proj", "model.layers.2.self_attn.k_proj",
      "model.layers.2.self_attn.v_proj", "model.layers.3.self_attn.q_proj", "model.layers.3.self_attn.k_proj",
      "model.layers.3.self_attn.v_proj", "model.layers.3.self_attn.o_proj"};
  EXPECT_EQ(in_fp8, expected_fp8);
}

// train.fp8_min_features: a projection with fewer input or output features than the limit stays bf16 (k/v with their
// 16 outputs under a limit of 17; every projection, each with a side of hidden_size 32, under 48).
TEST(Fp8Training, ProjectionsWithFewerFeaturesThanTheLimitStayBf16) {
  const model::ModelArgs a = selection_args(/*intermediate=*/64, /*layers=*/1);
  const auto selected = [&](int64_t min_features) {
    model::Transformer m(a);
    const auto left = model::enable_fp8_training(m, Fp8Training::kTensorwise, {{}, 0, min_features});
    std::vector<std::string> in_fp8;
    for (const auto& [path, lin] : m.projections()) {
      if (lin->fp8_training != Fp8Training::kOff) in_fp8.push_back(path.substr(std::string("model.layers.0.").size()));
    }
    EXPECT_EQ(left.size() + in_fp8.size(), m.projections().size());
    return in_fp8;
  };
  const std::vector<std::string> all = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  EXPECT_EQ(selected(0), all);
  EXPECT_EQ(selected(16), all);
  EXPECT_EQ(selected(17), (std::vector<std::string>{"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj",
                                                    "mlp.up_proj", "mlp.down_proj"}));
  EXPECT_TRUE(selected(48).empty());  // every projection has a side of 32 (hidden_size)
}

bool fp8_gpu() {
  return has_cuda() && model::fp8_tensor_cores(at::Device(at::kCUDA, 0));
}

// BF16 inputs, and F32 ones off bf16's grid (master weights); 20 columns: the rows kernel's element-wise loads for
// BF16 (its vectors are 8 elements), and a misaligned F32 view: the F32 element-wise loads and the column cast's copy.
TEST(Fp8Training, RowAndColumnCastKernelsEqualTheAtenCastsBitForBit) {
  if (!fp8_gpu()) GTEST_SKIP() << "no CUDA device with FP8 tensor cores in a build with our kernels";
  for (const auto& shape : std::vector<std::vector<int64_t>>{{256, 4096}, {64, 96}, {48, 64}, {16, 20}}) {
    SCOPED_TRACE(std::to_string(shape[0]) + " x " + std::to_string(shape[1]));
    const at::Tensor x_bf16 = random_bf16(shape, 3 + shape[1], 0.3).cuda();
    const at::Tensor x_f32 = x_bf16.to(at::kFloat) * (1.0 + 1e-3 * at::rand_like(x_bf16, at::kFloat));
    const at::Tensor x_f32_off = at::empty({x_f32.numel() + 1}, x_f32.options()).narrow(0, 1, x_f32.numel());
    x_f32_off.copy_(x_f32.flatten());  // 4 bytes past a 16-byte boundary
    for (const auto& [x, f] :
         {std::pair{x_bf16, Fp8Format::kE4m3}, std::pair{x_bf16, Fp8Format::kE5m2}, std::pair{x_f32, Fp8Format::kE4m3},
          std::pair{x_f32_off.view(x_f32.sizes()), Fp8Format::kE4m3}}) {
      SCOPED_TRACE(c10::toString(x.scalar_type()));
      const auto rows = model::fp8_cast_rows_cuda(x, f), rows_aten = quant::cast_fp8_rowwise(x, f, true);
      EXPECT_TRUE(bits_equal(rows.inverse, rows_aten.inverse));
      EXPECT_TRUE(bits_equal(rows.codes.view(at::kByte), rows_aten.codes.view(at::kByte)));
      const auto cols = model::fp8_cast_columns_cuda(x, f);
      const auto cols_aten = quant::cast_fp8_rowwise(x.t().contiguous(), f, true);
      EXPECT_TRUE(bits_equal(cols.inverse, cols_aten.inverse));
      EXPECT_TRUE(bits_equal(cols.codes.view(at::kByte), cols_aten.codes.view(at::kByte)));
    }
  }
}

// The one-read cast of the tensorwise recipe: its codes are the ATen cast's, its codes_t their transpose, padded with
// zero codes to 16 rows (37 and 70 rows: partial tiles and padding; 300 and 20 columns: the 8-byte loads; 4096 x
// 8200: enough elements for the amax pass's four loads in flight, and a partial tile across).
TEST(Fp8Training, CastInBothLayoutsIsTheAtenCastAndItsPaddedTranspose) {
  if (!fp8_gpu()) GTEST_SKIP() << "no CUDA device with FP8 tensor cores in a build with our kernels";
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{256, 4096}, {37, 64}, {70, 300}, {16, 20}, {4096, 8200}}) {
    SCOPED_TRACE(std::to_string(shape[0]) + " x " + std::to_string(shape[1]));
    const at::Tensor x_bf16 = random_bf16(shape, 11 + shape[0], 0.3).cuda();
    const at::Tensor x_f32 = x_bf16.to(at::kFloat) * (1.0 + 1e-3 * at::rand_like(x_bf16, at::kFloat));  // off bf16
    for (const auto& [x, f] : {std::pair{x_bf16, Fp8Format::kE4m3}, std::pair{x_bf16, Fp8Format::kE5m2},
                               std::pair{x_f32, Fp8Format::kE4m3}}) {
      SCOPED_TRACE(c10::toString(x.scalar_type()));
      const auto both = model::fp8_cast_tensorwise_both_cuda(x, f);
      const auto aten = quant::cast_fp8_tensorwise(x, f);
      EXPECT_TRUE(bits_equal(both.scaled.inverse, aten.inverse));
      EXPECT_TRUE(bits_equal(both.scaled.codes.view(at::kByte), aten.codes.view(at::kByte)));
      const int64_t padded = (shape[0] + 15) / 16 * 16;
      ASSERT_EQ(both.codes_t.sizes(), (std::vector<int64_t>{shape[1], padded}));
      const at::Tensor expected_t =
          at::constant_pad_nd(aten.codes.view(at::kByte).t(), {0, padded - shape[0]}).contiguous();
      EXPECT_TRUE(bits_equal(both.codes_t.view(at::kByte), expected_t));
    }
  }
}

double relative_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>() / b.to(at::kFloat).abs().max().item<double>();
}

// F32 master weights under bf16 autocast: both recipes cast the F32 weight itself (torchao casts the parameter, not
// an autocast copy), so its codes carry one rounding, in the forward and in the input gradient's GEMM (tensorwise reads
// the forward's codes transposed, rowwise casts the weight's columns); the weight gradient comes back in F32. On the
// CPU bit for bit the cast-then-GEMM definition; on the GPU's fast path (skipped without one) the same casts feed
// _scaled_mm.
TEST(Fp8Training, F32MasterWeightsAreCastAsTheyAre) {
  using quant::cast_fp8_rowwise;
  using quant::cast_fp8_tensorwise;
  const at::Tensor x = random_bf16({32, 64}, 21, 1.0), dy = random_bf16({32, 48}, 22, 1e-3);
  const at::Tensor w = random_bf16({48, 64}, 23, 0.05).to(at::kFloat) * (1.0 + 1e-3 * at::rand({48, 64}));
  ASSERT_FALSE(at::equal(w.to(at::kBFloat16).to(at::kFloat), w));  // the bf16 copy would round it
  for (const Fp8Training recipe : {Fp8Training::kTensorwise, Fp8Training::kRowwise}) {
    SCOPED_TRACE(recipe == Fp8Training::kRowwise ? "rowwise" : "tensorwise");
    const bool rowwise = recipe == Fp8Training::kRowwise;
    const quant::Fp8Scaled wq =
        rowwise ? cast_fp8_rowwise(w, Fp8Format::kE4m3, true) : cast_fp8_tensorwise(w, Fp8Format::kE4m3);  // [48, 64]
    const quant::Fp8Scaled w_by_columns = rowwise ? cast_fp8_rowwise(w.t().contiguous(), Fp8Format::kE4m3, true)
                                                  : quant::Fp8Scaled{wq.codes.t().contiguous(), wq.inverse};
    const at::Tensor expected_y = quant::fp8_scaled_gemm_reference(
        rowwise ? cast_fp8_rowwise(x, Fp8Format::kE4m3, true) : cast_fp8_tensorwise(x, Fp8Format::kE4m3), wq,
        at::kBFloat16);  // [32, 48]
    const at::Tensor expected_dx = quant::fp8_scaled_gemm_reference(
        rowwise ? cast_fp8_rowwise(dy, Fp8Format::kE4m3, true) : cast_fp8_tensorwise(dy, Fp8Format::kE5m2),
        w_by_columns, at::kBFloat16);  // [32, 64]
    at::Tensor y[2], dx[2], dw[2];
    for (int fast = 0; fast < (fp8_gpu() ? 2 : 1); ++fast) {
      const at::Device device = fast ? at::Device(at::kCUDA) : at::Device(at::kCPU);
      model::KernelPolicy policy;
      policy.kernels = fast == 1;
      const model::AutocastGuard autocast(device.type(), at::kBFloat16, true);
      const at::Tensor xi = x.to(device, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);  // leaves
      const at::Tensor wi = w.to(device, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
      y[fast] = model::fp8_training_linear(xi, wi, recipe, policy);
      y[fast].backward(dy.to(device));
      dx[fast] = xi.grad();
      dw[fast] = wi.grad();
      EXPECT_EQ(y[fast].scalar_type(), at::kBFloat16);
      EXPECT_EQ(dw[fast].scalar_type(), at::kFloat);
    }
    EXPECT_TRUE(bits_equal(y[0], expected_y));
    EXPECT_TRUE(bits_equal(dx[0], expected_dx));
    if (!fp8_gpu()) continue;
    EXPECT_LT(relative_diff(y[1].cpu(), y[0]), 1e-2);  // the GEMMs' summation order and rounding differ
    EXPECT_LT(relative_diff(dx[1].cpu(), dx[0]), 1e-2);
    EXPECT_LT(relative_diff(dw[1].cpu(), dw[0]), 1e-2);
  }
}

// 37 tokens: the weight gradient's GEMM reduces over a padded token dimension on the fast path.
TEST(Fp8Training, ScaledMmPathAgreesWithTheReferenceGemmsForwardAndBackward) {
  if (!fp8_gpu()) GTEST_SKIP() << "no CUDA device with FP8 tensor cores in a build with our kernels";
  model::KernelPolicy kernels;
  kernels.kernels = true;
  for (int64_t tokens : {64, 37}) {
    for (Fp8Training recipe : {Fp8Training::kTensorwise, Fp8Training::kRowwise}) {
      SCOPED_TRACE(std::to_string(tokens) + " tokens, recipe " + std::to_string(static_cast<int>(recipe)));
      const at::Tensor x = random_bf16({tokens, 256}, 5, 1.0).cuda(), w = random_bf16({192, 256}, 6, 0.05).cuda();
      const at::Tensor dy = random_bf16({tokens, 192}, 7, 1e-3).cuda();
      at::Tensor y[2], dx[2], dw[2];
      for (int fast = 0; fast < 2; ++fast) {
        const at::Tensor xi = x.clone().requires_grad_(true), wi = w.clone().requires_grad_(true);
        y[fast] = model::fp8_training_linear(xi, wi, recipe, fast ? kernels : model::KernelPolicy{});
        y[fast].backward(dy);
        dx[fast] = xi.grad();
        dw[fast] = wi.grad();
      }
      // The same casts; only the GEMMs' summation order and the BF16 rounding of their outputs differ.
      EXPECT_LT(relative_diff(y[1], y[0]), 1e-2);
      EXPECT_LT(relative_diff(dx[1], dx[0]), 1e-2);
      EXPECT_LT(relative_diff(dw[1], dw[0]), 1e-2);
    }
  }
}

// Projections that read one input (q/k/v) run through fp8_training_linears, which casts x once for all of them:
// each output and weight gradient is the one its own fp8_training_linear gives, bit for bit, and the input gradient
// their sum. On the GPU's fast path too (skipped without one).
TEST(Fp8Training, ProjectionsSharingAnInputEqualEachAlone) {
  std::vector<model::KernelPolicy> policies{model::KernelPolicy{}};
  if (fp8_gpu()) {
    policies.emplace_back();
    policies.back().kernels = true;
  }
  for (const model::KernelPolicy& policy : policies) {
    for (Fp8Training recipe : {Fp8Training::kTensorwise, Fp8Training::kRowwise}) {
      SCOPED_TRACE(std::string(policy.kernels ? "fast path" : "reference") + ", recipe " +
                   std::to_string(static_cast<int>(recipe)));
      const at::Device device = policy.kernels ? at::Device(at::kCUDA) : at::Device(at::kCPU);
      const at::Tensor x = random_bf16({2, 21, 64}, 11, 1.0).to(device);  // 42 tokens: padded on the fast path
      const std::vector<at::Tensor> w = {random_bf16({64, 64}, 12, 0.05).to(device),
                                         random_bf16({32, 64}, 13, 0.05).to(device),
                                         random_bf16({32, 64}, 14, 0.02).to(device)};
      std::vector<at::Tensor> dy;
      for (size_t i = 0; i < w.size(); ++i) dy.push_back(random_bf16({2, 21, w[i].size(0)}, 20 + i, 1e-3).to(device));

      const at::Tensor xg = x.clone().requires_grad_(true);
      std::vector<at::Tensor> wg;
      for (const at::Tensor& wi : w) wg.push_back(wi.clone().requires_grad_(true));
      const std::vector<at::Tensor> together = model::fp8_training_linears(xg, wg, recipe, policy);
      ASSERT_EQ(together.size(), w.size());
      torch::autograd::backward(together, dy);

      at::Tensor dx_alone = at::zeros_like(x);
      for (size_t i = 0; i < w.size(); ++i) {
        const at::Tensor xa = x.clone().requires_grad_(true), wa = w[i].clone().requires_grad_(true);
        const at::Tensor alone = model::fp8_training_linear(xa, wa, recipe, policy);
        alone.backward(dy[i]);
        EXPECT_TRUE(bits_equal(together[i], alone)) << "output " << i;
        EXPECT_TRUE(bits_equal(wg[i].grad(), wa.grad())) << "weight gradient " << i;
        dx_alone.add_(xa.grad());
      }
      EXPECT_TRUE(bits_equal(xg.grad(), dx_alone));  // summed in the same order, in x's dtype
    }
  }
}

// The decoder's q/k/v and gate/up run through linear_group, which hands projections trained in FP8 to
// fp8_training_linears when the policy groups GEMMs: each output (bias included) and every gradient equal each
// layer's own forward.
TEST(Fp8Training, GroupedLayersEqualEachLayerAlone) {
  for (Fp8Training recipe : {Fp8Training::kTensorwise, Fp8Training::kRowwise}) {
    SCOPED_TRACE("recipe " + std::to_string(static_cast<int>(recipe)));
    auto make_layers = [&] {
      std::vector<model::Linear> layers;
      for (int64_t i = 0; i < 3; ++i) {
        const int64_t out = i == 0 ? 64 : 32;
        model::Linear layer(64, out, /*bias=*/i == 1);
        at::NoGradGuard no_grad;
        layer->weight.copy_(random_bf16({out, 64}, 40 + i, 0.05));
        if (i == 1) layer->bias.copy_(random_bf16({out}, 50, 0.1));
        layer->to(at::kBFloat16);
        layer->fp8_training = recipe;
        layers.push_back(layer);
      }
      return layers;
    };
    const at::Tensor x = random_bf16({3, 7, 64}, 45, 1.0);
    std::vector<at::Tensor> dy;
    for (int64_t out : {64, 32, 32}) dy.push_back(random_bf16({3, 7, out}, 60 + out, 1e-3));
    model::KernelPolicy grouped;
    grouped.group_gemms = true;

    auto together = make_layers(), alone = make_layers();
    std::vector<model::LinearImpl*> ptrs;
    for (auto& l : together) ptrs.push_back(l.get());
    const at::Tensor xg = x.clone().requires_grad_(true), xa = x.clone().requires_grad_(true);
    const model::LinearGroupOutput out = model::linear_group(xg, ptrs, grouped);
    ASSERT_EQ(out.outputs.size(), 3u);
    torch::autograd::backward(out.outputs, dy);
    std::vector<at::Tensor> outputs_alone;
    for (auto& l : alone) outputs_alone.push_back(l->forward(xa, model::KernelPolicy{}));
    torch::autograd::backward(outputs_alone, dy);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(bits_equal(out.outputs[i], outputs_alone[i])) << "output " << i;
      EXPECT_TRUE(bits_equal(together[i]->weight.grad(), alone[i]->weight.grad())) << "weight gradient " << i;
    }
    EXPECT_TRUE(bits_equal(together[1]->bias.grad(), alone[1]->bias.grad()));
    EXPECT_LT(relative_diff(xg.grad(), xa.grad()), 1e-2);  // autograd may sum the three in another order
  }
}

// The separate ops that fp8_training_mlp stands for: fp8_training_linears for gate/up (or the joint weight), the fused
// SwiGLU, fp8_training_linear for down.
at::Tensor separate_fp8_mlp(const at::Tensor& x, const std::vector<at::Tensor>& gate_up, const at::Tensor& down,
                            bool gelu, const model::KernelPolicy& policy) {
  const std::vector<at::Tensor> gu = model::fp8_training_linears(x, gate_up, Fp8Training::kTensorwise, policy);
  const at::Tensor h =
      gu.size() == 1 ? model::fused_swiglu_joint(gu[0], gelu) : model::fused_swiglu(gu[0], gu[1], gelu);
  return model::fp8_training_linear(h, down, Fp8Training::kTensorwise, policy);
}

struct MlpCase {
  int64_t tokens, hidden, inter;
  bool joint, gelu, f32_autocast;
};

// The gated MLP as one op (fp8_training_mlp): its SwiGLU kernels hand the amax of h and of the gate/up gradients to
// the casts, which then skip their amax pass. Output and every gradient equal the separate ops bit for bit: separate
// gate/up weights and one joint weight, SwiGLU and GeGLU, bf16 weights and F32 weights under bf16 autocast, 37 tokens
// (the weight gradients reduce over a padded token dimension), and 4,200 x 2,048 activations (more than the kernels'
// 4,096 blocks cover in one pass, so their grid-stride loops and amax run over several).
TEST(Fp8Training, MlpAsOneOpEqualsItsSeparateOpsBitForBit) {
  if (!fp8_gpu()) GTEST_SKIP() << "no CUDA device with FP8 tensor cores in a build with our kernels";
  model::KernelPolicy kernels;
  kernels.kernels = true;
  const std::vector<MlpCase> cases = {{37, 128, 256, false, false, false}, {37, 128, 256, true, false, false},
                                      {37, 128, 256, false, true, false},  {37, 128, 256, true, true, true},
                                      {37, 128, 256, false, false, true},  {4200, 64, 2048, false, false, false}};
  for (const MlpCase& c : cases) {
    SCOPED_TRACE(std::to_string(c.tokens) + " tokens" + (c.joint ? ", joint" : ", separate") +
                 (c.gelu ? ", GeGLU" : ", SwiGLU") + (c.f32_autocast ? ", F32 under autocast" : ", bf16"));
    const at::ScalarType wdtype = c.f32_autocast ? at::kFloat : at::kBFloat16;
    const at::Tensor x = random_bf16({c.tokens, c.hidden}, 70, 1.0).cuda();
    const at::Tensor dy = random_bf16({c.tokens, c.hidden}, 71, 1e-3).cuda();
    std::vector<at::Tensor> w_in = {random_bf16({c.inter, c.hidden}, 72, 0.05).cuda().to(wdtype),
                                    random_bf16({c.inter, c.hidden}, 73, 0.05).cuda().to(wdtype)};
    if (c.joint) w_in = {at::cat(w_in)};  // gate rows first
    const at::Tensor w_down = random_bf16({c.hidden, c.inter}, 74, 0.05).cuda().to(wdtype);
    std::unique_ptr<model::AutocastGuard> autocast;
    if (c.f32_autocast) autocast = std::make_unique<model::AutocastGuard>(at::kCUDA, at::kBFloat16, true);
    auto leaves = [&] {
      std::vector<at::Tensor> w;
      for (const at::Tensor& t : w_in) w.push_back(t.clone().requires_grad_(true));
      return std::make_tuple(x.clone().requires_grad_(true), w, w_down.clone().requires_grad_(true));
    };
    auto [x1, w1, d1] = leaves();
    ASSERT_TRUE(model::fp8_mlp_available(x1, w1, d1, kernels));
    const at::Tensor y1 = model::fp8_training_mlp(x1, w1, d1, c.gelu, kernels);
    y1.backward(dy);
    auto [x2, w2, d2] = leaves();
    const at::Tensor y2 = separate_fp8_mlp(x2, w2, d2, c.gelu, kernels);
    y2.backward(dy);

    EXPECT_TRUE(bits_equal(y1, y2));
    EXPECT_TRUE(bits_equal(x1.grad(), x2.grad()));
    EXPECT_TRUE(bits_equal(d1.grad(), d2.grad()));
    for (size_t i = 0; i < w1.size(); ++i) EXPECT_TRUE(bits_equal(w1[i].grad(), w2[i].grad())) << "weight " << i;
  }
}

// The MLP module takes the one-op path only where every projection trains with tensorwise FP8 and no bias, and its
// output is then the separate ops'.
TEST(Fp8Training, MlpModuleRunsAsOneOpOnlyWhenEveryProjectionQualifies) {
  if (!fp8_gpu()) GTEST_SKIP() << "no CUDA device with FP8 tensor cores in a build with our kernels";
  model::KernelPolicy kernels;
  kernels.kernels = true;
  model::ModelArgs a;
  a.hidden_size = 64;
  a.intermediate_size = 128;
  for (const bool bias : {false, true}) {
    a.mlp_bias = bias;
    model::MLP mlp(a);
    mlp->to(at::Device(at::kCUDA), at::kBFloat16);
    const at::Tensor x = random_bf16({2, 8, 64}, 80, 1.0).cuda();
    EXPECT_FALSE(mlp->fp8_forward(x, kernels).defined());  // bf16 GEMMs
    for (model::Linear* l : {&mlp->gate_proj, &mlp->up_proj, &mlp->down_proj}) {
      (*l)->fp8_training = Fp8Training::kTensorwise;
    }
    const at::Tensor y = mlp->fp8_forward(x, kernels);
    ASSERT_EQ(y.defined(), !bias) << "bias " << bias;
    if (bias) continue;
    EXPECT_TRUE(bits_equal(y, separate_fp8_mlp(x, {mlp->gate_proj->weight, mlp->up_proj->weight},
                                               mlp->down_proj->weight, false, kernels)));
    EXPECT_FALSE(mlp->fp8_forward(x, model::KernelPolicy{}).defined());  // no kernels: the separate ops
    mlp->up_proj->fp8_training = Fp8Training::kRowwise;
    EXPECT_FALSE(mlp->fp8_forward(x, kernels).defined());
  }
}

// A full fine-tuning step of a decoder with tensorwise FP8 training and F32 master weights, the optimizer writing
// each FP8 weight's amax beside its step: the next forward's casts take it wherever the F32 step kernel took the
// weight (q/o and the MLP, 1M+ elements; k/v, 256K, step in PyTorch's kernel and their casts compute it). The logits
// are those of the same forward after the weights were touched in place (every amax then describes nothing and each
// cast computes its own), bit for bit.
TEST(Fp8Training, WeightAmaxFromTheOptimizerStepGivesTheSameForward) {
  if (!fp8_gpu()) GTEST_SKIP() << "no CUDA device with FP8 tensor cores in a build with our kernels";
  model::ModelArgs a;
  a.vocab_size = 512;
  a.hidden_size = 1024;
  a.intermediate_size = 2048;
  a.num_layers = 2;
  a.num_heads = 8;
  a.num_kv_heads = 2;
  a.head_dim = 128;
  model::KernelPolicy kernels;
  kernels.kernels = true;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  model::Transformer m(a);
  m.to(at::Device(at::kCUDA), at::kFloat);
  std::vector<optim::NamedParam> params;
  for (const auto& item : m.named_parameters()) {
    const at::Tensor& p = item.value();
    {
      at::NoGradGuard no_grad;
      p.copy_(p.dim() == 1 ? at::ones(p.sizes()) : at::randn(p.sizes(), gen) * 0.02);
    }
    params.emplace_back(item.key(), p);
  }
  model::enable_fp8_training(m, Fp8Training::kTensorwise, {{}, 0, 0});
  m.set_kernel_policy(kernels);
  optim::AdamWOptions opts;
  opts.lr = 1e-3;
  opts.cuda_kernels = true;
  optim::AdamW opt(params, opts);
  const auto sinks = model::fp8_weight_amax_sinks(m);
  ASSERT_EQ(sinks.size(), 14u);  // every projection of both layers
  opt.write_amax_into(sinks);
  const at::Tensor ids = at::randint(a.vocab_size, {2, 64}, gen).cuda();  // I64 [B, T]
  const model::AutocastGuard autocast(at::kCUDA, at::kBFloat16, true);
  const at::Tensor loss =
      at::cross_entropy_loss(m.forward(ids).slice(1, 0, -1).flatten(0, 1).to(at::kFloat), ids.slice(1, 1).flatten());
  loss.backward();
  opt.step();
  opt.zero_grad();
  std::map<std::string, at::Tensor> weights;  // by parameter name
  for (const auto& [path, lin] : m.projections()) weights[path + ".weight"] = lin->weight;
  for (const char* name : {"q_proj", "o_proj"}) {
    const std::string key = std::string("model.layers.1.self_attn.") + name + ".weight";
    EXPECT_TRUE(sinks.at(key)->of(weights.at(key)).defined()) << key;
  }
  const std::string k_key = "model.layers.1.self_attn.k_proj.weight";
  EXPECT_FALSE(sinks.at(k_key)->of(weights.at(k_key)).defined());
  at::NoGradGuard no_grad;
  const at::Tensor with_known = m.forward(ids);  // [B, T, V]
  const auto q_sink = sinks.at("model.layers.1.self_attn.q_proj.weight");
  const at::Tensor q_amax = q_sink->amax.clone();
  q_sink->amax.mul_(4.0);  // a wrong amax, still taken: the output moves
  EXPECT_FALSE(bits_equal(with_known, m.forward(ids)));
  q_sink->amax.copy_(q_amax);
  for (auto& [name, w] : weights) w.mul_(1.0);  // the same bits, a newer version
  for (const auto& [name, sink] : sinks) EXPECT_FALSE(sink->of(weights.at(name)).defined()) << name;
  EXPECT_TRUE(bits_equal(with_known, m.forward(ids)));
}
}  // namespace
}  // namespace ft::test

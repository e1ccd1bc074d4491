// Projections on a frozen FP8 base (model.quantize: fp8): the layer's forward and input gradient against the
// quantize-then-GEMM definition (quant/fp8.h), the grouped path against each layer alone, adapters on top; on a GPU
// (skipped without one) our quantization kernel against the ATen path bit for bit, and the _scaled_mm path against
// the F32 reference GEMM.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/fp8_linear.h"
#include "model/kernel_policy.h"
#include "model/linear.h"
#include "model/mode_guards.h"
#include "quant/fp8.h"
#include "support/tensor_bits.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ft::test {
namespace {

at::Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed, double std = 0.05) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::kFloat) * std;
}

model::Linear fp8_layer(int64_t in, int64_t out, bool bias, uint64_t seed, at::Device device = at::kCPU) {
  model::Linear layer(in, out, bias);
  at::NoGradGuard no_grad;
  layer->weight.copy_(random_tensor({out, in}, seed));
  if (bias) layer->bias.copy_(random_tensor({out}, seed + 1));
  layer->to(device);
  layer->weight.set_requires_grad(false);
  if (bias) layer->bias.set_requires_grad(false);
  layer->quantize_fp8({}, at::kFloat);
  return layer;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a.to(at::kFloat).cpu() - b.to(at::kFloat).cpu()).abs().max().item<double>();
}

// dy W by the definition: dy's columns times W's row scales, quantized per row, then the GEMM over W's codes.
at::Tensor input_gradient_by_definition(const at::Tensor& dy2d, const quant::Fp8Tensor& w) {
  const quant::Fp8Tensor dyq = quant::quantize_fp8_rows(dy2d.to(at::kFloat) * w.scale.unsqueeze(0));
  return at::mm(dyq.data.to(at::kFloat), w.data.to(at::kFloat)) * dyq.scale.unsqueeze(1);  // [N, in]
}

TEST(Fp8Linear, ForwardAndInputGradientFollowTheQuantizedGemmDefinition) {
  model::Linear layer = fp8_layer(128, 96, /*bias=*/true, 3);
  EXPECT_FALSE(layer->weight.defined());
  for (const auto& p : layer->named_parameters()) EXPECT_NE(p.key(), "weight") << "the dense weight is gone";
  EXPECT_EQ(layer->out_features(), 96);
  EXPECT_EQ(layer->in_features(), 128);
  EXPECT_EQ(layer->quantized_numel(), 96 * 128);
  const quant::Fp8Tensor& w = *layer->fp8;

  const at::Tensor x = random_tensor({2, 5, 128}, 9, 1.0).requires_grad_(true);
  const at::Tensor y = layer->forward(x, model::KernelPolicy{});  // [2, 5, 96]
  const at::Tensor x2d = x.detach().reshape({10, 128});
  const at::Tensor want = quant::fp8_gemm_reference(quant::quantize_fp8_rows(x2d), w, at::kFloat) + layer->bias;
  EXPECT_TRUE(at::equal(y.detach().reshape({10, 96}), want));
  // And FP8 is close to the dense GEMM it replaces (e4m3 keeps 3 mantissa bits).
  const at::Tensor dense = at::linear(x2d, quant::dequantize_fp8_rows(w, at::kFloat), layer->bias);
  EXPECT_LT(max_diff(y.reshape({10, 96}), dense), 0.05 * dense.abs().max().item<double>());

  const at::Tensor dy = random_tensor({2, 5, 96}, 11, 1.0);
  y.backward(dy);
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(at::equal(x.grad().reshape({10, 128}), input_gradient_by_definition(dy.reshape({10, 96}), w)));
}

TEST(Fp8Linear, JoinedGroupEqualsEachLayerAloneAndKeepsItsRows) {
  std::vector<model::Linear> layers = {fp8_layer(64, 64, true, 21), fp8_layer(64, 32, true, 23),
                                       fp8_layer(64, 32, true, 25)};
  std::vector<model::LinearImpl*> ptrs;
  for (auto& l : layers) ptrs.push_back(l.get());
  const at::Tensor x = random_tensor({3, 7, 64}, 31, 1.0);
  std::vector<at::Tensor> alone;
  for (auto& l : layers) alone.push_back(l->forward(x, model::KernelPolicy{}).detach());
  const at::Tensor codes1 = layers[1]->fp8->data.clone();

  ASSERT_TRUE(model::join_frozen_weights(ptrs));
  EXPECT_TRUE(at::equal(layers[1]->fp8->data, codes1)) << "joining moves the codes, it does not change them";
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(4);
  layers[2]->add_lora(4, 8.0, 0.0, gen);
  model::KernelPolicy grouped;
  grouped.group_gemms = true;
  const model::LinearGroupOutput out = model::linear_group(x, ptrs, grouped);
  ASSERT_TRUE(out.joint.defined()) << "one GEMM over the joined FP8 codes";
  ASSERT_EQ(out.outputs.size(), 3u);
  for (size_t i = 0; i < layers.size(); ++i) EXPECT_LT(max_diff(out.outputs[i], alone[i]), 1e-5) << "layer " << i;
}

TEST(Fp8Linear, AdaptersTrainOnTheFrozenBaseAndDoNotMergeIntoIt) {
  model::Linear layer = fp8_layer(64, 48, false, 41);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  layer->add_lora(8, 16.0, 0.0, gen);
  {
    at::NoGradGuard no_grad;
    layer->lora_b.normal_(0.0, 0.1, gen);
  }
  const at::Tensor x = random_tensor({6, 64}, 43, 1.0);
  layer->forward(x, model::KernelPolicy{}).square().sum().backward();
  ASSERT_TRUE(layer->lora_a.grad().defined());
  EXPECT_GT(layer->lora_a.grad().abs().max().item<double>(), 0.0);
  EXPECT_GT(layer->lora_b.grad().abs().max().item<double>(), 0.0);
  try {
    layer->merge_lora();
    FAIL() << "merged into FP8 codes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FP8 weight"), std::string::npos) << e.what();
  }
}

TEST(Fp8Linear, KernelQuantizesRowsToTheBitsOfTheAtenPath) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  if (!model::KernelPolicy::built_with_kernels()) GTEST_SKIP() << "built without the CUDA kernels";
  uint64_t seed = 51;
  for (const auto dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
    // 4096 columns take the wide block; 7 rows of 40 the narrow one, a row of zeros the scale 1; 37 columns are no
    // whole number of 16-byte vectors (one element per access); 14336, 28672 and 40960 columns take several
    // vectors per thread, unevenly (the widths of an MLP's activations and gradients).
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{33, 4096}, {7, 40}, {5, 37}, {3, 14336}, {2, 28672}, {2, 40960}}) {
      SCOPED_TRACE(::testing::Message() << dtype << " " << shape[0] << "x" << shape[1]);
      const at::Tensor normal = random_tensor(shape, seed++, 2.0);
      const at::Tensor spread = random_tensor(shape, seed++, 1.0).exp();
      at::Tensor x = (normal * spread).to(dtype).cuda();
      x[1].zero_();
      const quant::Fp8Tensor ours = model::fp8_quantize_rows_cuda(x, at::Tensor());
      const quant::Fp8Tensor aten = quant::quantize_fp8_rows(x);
      EXPECT_TRUE(bits_equal(ours.scale, aten.scale));
      EXPECT_TRUE(bits_equal(ours.data.view(at::kByte), aten.data.view(at::kByte)));
      // With column scales (the backward's dy * W's row scales): the product in F32, the scale in F32.
      const at::Tensor cols = random_tensor({shape[1]}, seed++, 1.0).abs().cuda() + 0.01;
      const quant::Fp8Tensor scaled = model::fp8_quantize_rows_cuda(x, cols);
      const quant::Fp8Tensor scaled_aten = quant::quantize_fp8_rows(x.to(at::kFloat) * cols.unsqueeze(0));
      EXPECT_TRUE(bits_equal(scaled.scale, scaled_aten.scale));
      EXPECT_TRUE(bits_equal(scaled.data.view(at::kByte), scaled_aten.data.view(at::kByte)));
    }
  }
  const at::Tensor codes = quant::quantize_fp8_rows(random_tensor({96, 200}, 7).cuda()).data;
  EXPECT_TRUE(bits_equal(model::fp8_transpose_cuda(codes).view(at::kByte), codes.t().contiguous().view(at::kByte)));
}

TEST(Fp8Linear, ScaledMmPathAgreesWithTheReferenceGemmForwardAndBackward) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  if (!model::KernelPolicy::built_with_kernels()) GTEST_SKIP() << "built without the CUDA kernels";
  model::Linear layer = fp8_layer(256, 192, false, 61, at::kCUDA);
  if (!model::fp8_gemm_available(at::Device(at::kCUDA, 0), at::kBFloat16, *layer->fp8)) {
    GTEST_SKIP() << "this GPU has no FP8 GEMMs (before sm_89)";
  }
  model::KernelPolicy kernels;
  kernels.kernels = true;
  const at::Tensor x = random_tensor({40, 256}, 63, 1.0).to(at::kBFloat16).cuda();
  const at::Tensor dy = random_tensor({40, 192}, 65, 1.0).to(at::kBFloat16).cuda();
  at::Tensor grads[2];
  at::Tensor outs[2];
  for (int fast = 0; fast < 2; ++fast) {
    const at::Tensor xi = x.clone().requires_grad_(true);
    {
      model::AutocastGuard autocast(at::kCUDA, at::kBFloat16, true);
      outs[fast] = layer->forward(xi, fast ? kernels : model::KernelPolicy{});
    }
    outs[fast].backward(dy);
    grads[fast] = xi.grad();
  }
  EXPECT_EQ(outs[1].scalar_type(), at::kBFloat16);
  // The same quantized operands; only the GEMM's summation order and the BF16 rounding of its output differ.
  EXPECT_LT(max_diff(outs[1], outs[0]), 1e-2 * outs[0].abs().max().item<double>());
  EXPECT_LT(max_diff(grads[1], grads[0]), 1e-2 * grads[0].abs().max().item<double>());
}

}  // namespace
}  // namespace ft::test

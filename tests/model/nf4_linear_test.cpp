// Projections on a frozen NF4 base (QLoRA): their GEMMs against the dense GEMMs of the dequantized weight, the
// grouped path against each layer alone, adapters on top, and our dequantization kernel against the ATen path (GPU;
// skipped without CUDA). Parity of a whole quantized model with PEFT on bitsandbytes: parity_test.cpp.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "model/fp8_training.h"
#include "model/kernel_policy.h"
#include "model/linear.h"
#include "model/nf4_linear.h"
#include "model/pretrained.h"
#include "model/transformer.h"
#include "quant/fp8.h"
#include "quant/nf4.h"
#include "support/test_support.h"
#include "tiny_config.h"
#include "util/error.h"

namespace ft::test {
namespace {

at::Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed, double std = 0.05) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::kFloat) * std;
}

model::Linear quantized_layer(int64_t in, int64_t out, bool bias, uint64_t seed) {
  model::Linear layer(in, out, bias);
  at::NoGradGuard no_grad;
  layer->weight.copy_(random_tensor({out, in}, seed));
  if (bias) layer->bias.copy_(random_tensor({out}, seed + 1));
  layer->weight.set_requires_grad(false);
  if (bias) layer->bias.set_requires_grad(false);
  layer->quantize_nf4({}, at::kFloat, 64);
  return layer;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a.to(at::kFloat).cpu() - b.to(at::kFloat).cpu()).abs().max().item<double>();
}

TEST(Nf4Linear, ForwardAndInputGradientAreTheGemmsOfTheDequantizedWeight) {
  model::Linear layer = quantized_layer(128, 96, /*bias=*/true, 3);
  EXPECT_FALSE(layer->weight.defined());
  for (const auto& p : layer->named_parameters()) EXPECT_NE(p.key(), "weight") << "the dense weight is gone";
  EXPECT_EQ(layer->out_features(), 96);
  EXPECT_EQ(layer->in_features(), 128);
  const at::Tensor w = quant::dequantize_nf4(*layer->nf4, at::kFloat);  // F32 [96, 128]

  const at::Tensor x = random_tensor({2, 5, 128}, 9, 1.0).requires_grad_(true);
  const at::Tensor y = layer->forward(x, model::KernelPolicy{});  // [2, 5, 96]
  const at::Tensor x_ref = x.detach().clone().requires_grad_(true);
  const at::Tensor y_ref = at::linear(x_ref, w, layer->bias);
  EXPECT_LT(max_diff(y, y_ref), 1e-5);

  const at::Tensor dy = random_tensor({2, 5, 96}, 11, 1.0);
  y.backward(dy);
  y_ref.backward(dy);
  ASSERT_TRUE(x.grad().defined());
  EXPECT_LT(max_diff(x.grad(), x_ref.grad()), 1e-5);
}

// The layer stores what quantize_nf4 makes (block and double quantization); quantize_nf4 itself is checked against
// bitsandbytes in tests/quant.
TEST(Nf4Linear, TheLayerKeepsTheDoubleQuantizedCodesOfQuantizeNf4) {
  model::Linear dense(64, 48, false);
  {
    at::NoGradGuard no_grad;
    dense->weight.copy_(random_tensor({48, 64}, 5));
  }
  const at::Tensor values = dense->weight.detach().clone();
  dense->quantize_nf4(values, at::kFloat, 64);
  const quant::Nf4Tensor expected = quant::quantize_nf4(values, 64, /*double_quant=*/true);
  ASSERT_TRUE(dense->nf4->double_quant());
  EXPECT_TRUE(at::equal(dense->nf4->packed, expected.packed));
  EXPECT_TRUE(at::equal(dense->nf4->absmax_codes, expected.absmax_codes));
  EXPECT_TRUE(at::equal(dense->nf4->absmax2, expected.absmax2));
  EXPECT_THROW(dense->quantize_nf4({}, at::kFloat, 64), Error) << "quantized twice";
}

// model.quantize without model.path (a model built from its shape, as the benchmarks build 70B ones that no disk
// holds): init_weights quantizes each projection as it draws it, which gives the codes of the same draws quantized
// afterwards; every other parameter is what the dense init gives.
TEST(Nf4Linear, AModelInitialisedFromItsShapeQuantizesTheSameDraws) {
  const model::ModelArgs args = model::args_from_config(tiny_model_config("llama"), 50);
  model::Transformer dense(args), quantized(args);
  model::init_weights(dense, 0.2, 7, at::Device(at::kCPU), at::kFloat);
  model::init_weights(quantized, 0.2, 7, at::Device(at::kCPU), at::kFloat, BaseQuantization::kNf4);
  const auto dense_projections = dense.projections();
  const auto projections = quantized.projections();
  ASSERT_EQ(projections.size(), dense_projections.size());
  ASSERT_EQ(projections.size(), 2u * 7u);
  for (size_t i = 0; i < projections.size(); ++i) {
    const auto& [path, layer] = projections[i];
    ASSERT_TRUE(layer->nf4) << path;
    EXPECT_FALSE(layer->weight.defined()) << path << ": the dense weight is dropped";
    const quant::Nf4Tensor expected = quant::quantize_nf4(dense_projections[i].second->weight.detach(), 64, true);
    EXPECT_TRUE(at::equal(layer->nf4->packed, expected.packed)) << path;
    EXPECT_TRUE(at::equal(layer->nf4->absmax_codes, expected.absmax_codes)) << path;
    EXPECT_TRUE(at::equal(layer->nf4->absmax2, expected.absmax2)) << path;
  }
  std::map<std::string, at::Tensor> dense_rest;
  for (const auto& [name, value] : model::base_parameters(dense)) dense_rest.emplace(name, value);
  const auto rest = model::base_parameters(quantized);
  EXPECT_EQ(rest.size(), dense_rest.size() - projections.size());
  for (const auto& [name, value] : rest) {
    ASSERT_EQ(dense_rest.count(name), 1u) << name;
    EXPECT_TRUE(at::equal(value, dense_rest.at(name))) << name;
  }
}

TEST(Nf4Linear, GroupedProjectionsEqualEachLayerAlone) {
  std::vector<model::Linear> layers = {quantized_layer(64, 64, true, 21), quantized_layer(64, 32, true, 23),
                                       quantized_layer(64, 32, true, 25)};
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(4);
  layers[0]->add_lora(4, 8.0, 0.0, gen);
  layers[2]->add_lora(4, 8.0, 0.0, gen);
  {
    at::NoGradGuard no_grad;
    layers[0]->lora_b.normal_(0.0, 0.1, gen);
    layers[2]->lora_b.normal_(0.0, 0.1, gen);
  }
  std::vector<model::LinearImpl*> ptrs;
  for (auto& l : layers) ptrs.push_back(l.get());
  model::KernelPolicy grouped;
  grouped.group_gemms = true;
  const at::Tensor x = random_tensor({3, 7, 64}, 31, 1.0);
  const model::LinearGroupOutput out = model::linear_group(x, ptrs, grouped);
  ASSERT_TRUE(out.joint.defined()) << "one GEMM over the stacked NF4 weights";
  ASSERT_EQ(out.outputs.size(), 3u);
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_LT(max_diff(out.outputs[i], layers[i]->forward(x, model::KernelPolicy{})), 1e-5) << "layer " << i;
  }
}

TEST(Nf4Linear, AnInputOnAnotherDeviceThanTheCodesIsAClearError) {
  model::Linear layer = quantized_layer(64, 32, false, 71);  // codes on the CPU
  try {
    // The meta device stands in for a GPU: the check comes before any computation.
    layer->forward(at::empty({2, 64}, at::TensorOptions().device(at::kMeta)), model::KernelPolicy{});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NF4 weight on cpu, its input on meta"), std::string::npos) << e.what();
  }
}

TEST(Nf4Linear, AdaptersTrainOnTheFrozenBaseAndDoNotMergeIntoIt) {
  model::Linear layer = quantized_layer(64, 48, false, 41);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  layer->add_lora(8, 16.0, 0.0, gen);
  {
    at::NoGradGuard no_grad;
    layer->lora_b.normal_(0.0, 0.1, gen);
  }
  const at::Tensor x = random_tensor({6, 64}, 43, 1.0);
  layer->forward(x, model::KernelPolicy{}).square().sum().backward();
  ASSERT_TRUE(layer->lora_a.grad().defined());
  ASSERT_TRUE(layer->lora_b.grad().defined());
  EXPECT_GT(layer->lora_a.grad().abs().max().item<double>(), 0.0);
  EXPECT_THROW(layer->merge_lora(), Error);
}

TEST(Nf4Linear, KernelDequantizesTheBitsOfTheAtenPath) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  if (!model::KernelPolicy::built_with_kernels()) GTEST_SKIP() << "built without the CUDA kernels";
  model::KernelPolicy kernels;
  kernels.kernels = true;
  uint64_t seed = 51;
  for (const bool double_quant : {true, false}) {
    for (const auto dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
      for (const int64_t blocksize : {64, 128}) {
        SCOPED_TRACE(::testing::Message() << dtype << " block " << blocksize << " double " << double_quant);
        model::Nf4Rows rows;
        // 300 x 256 has 1200 blocks: more than one 256-block group of the double-quantized absmax.
        for (const std::vector<int64_t>& shape : {std::vector<int64_t>{300, 256}, {40, 256}, {8, 256}}) {
          const at::Tensor w = random_tensor(shape, seed++).to(dtype).cuda();
          rows.push_back(std::make_shared<const quant::Nf4Tensor>(quant::quantize_nf4(w, blocksize, double_quant)));
        }
        ASSERT_TRUE(model::nf4_dequantize_available(*rows[0]));
        const at::Tensor by_kernel = model::dequantize_rows(rows, dtype, kernels);  // [348, 256]
        const at::Tensor by_aten = model::dequantize_rows(rows, dtype, model::KernelPolicy{});
        EXPECT_TRUE(at::equal(by_kernel, by_aten));
      }
    }
  }
  // 120 elements, not whole units of 16: the element-wise kernel.
  const at::Tensor w = random_tensor({5, 24}, seed).to(at::kBFloat16).cuda();
  const model::Nf4Rows odd{std::make_shared<const quant::Nf4Tensor>(quant::quantize_nf4(w, 64, true))};
  ASSERT_TRUE(model::nf4_dequantize_available(*odd[0]));
  EXPECT_TRUE(at::equal(model::dequantize_rows(odd, at::kBFloat16, kernels),
                        model::dequantize_rows(odd, at::kBFloat16, model::KernelPolicy{})));
}

TEST(Nf4Linear, QuantizedOnCudaItComputesWhatTheCpuLayerDoes) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  model::Linear cpu_layer = quantized_layer(256, 128, true, 61);
  model::Linear cuda_layer(256, 128, true);
  {
    at::NoGradGuard no_grad;
    cuda_layer->weight.copy_(random_tensor({128, 256}, 61));
    cuda_layer->bias.copy_(random_tensor({128}, 62));
  }
  cuda_layer->to(at::kCUDA);
  cuda_layer->weight.set_requires_grad(false);
  cuda_layer->quantize_nf4({}, at::kFloat, 64);  // codes on the layer's device
  ASSERT_TRUE(cuda_layer->nf4->packed.is_cuda());
  model::KernelPolicy kernels;
  kernels.kernels = model::KernelPolicy::built_with_kernels();
  const at::Tensor x = random_tensor({4, 256}, 63, 1.0);
  const at::Tensor xc = x.cuda().requires_grad_(true);
  const at::Tensor y = cuda_layer->forward(xc, kernels);
  EXPECT_LT(max_diff(y, cpu_layer->forward(x, model::KernelPolicy{})), 1e-4);
  y.sum().backward();
  EXPECT_TRUE(xc.grad().defined());
}

// model.nf4_compute: fp8. The reference is the FP8 base's arithmetic (quant/fp8.h, checked against torchao) on the
// F32 dequantized weight; the dense GEMM bounds how far FP8 moves the result.
model::Linear fp8_compute_layer(int64_t in, int64_t out, bool bias, uint64_t seed) {
  model::Linear layer = quantized_layer(in, out, bias, seed);
  layer->nf4_compute = Nf4Compute::kFp8;
  return layer;
}

// |a - b| / |b| over the whole tensor.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kFloat).cpu() - b.to(at::kFloat).cpu()).norm() / b.to(at::kFloat).cpu().norm()).item<double>();
}

TEST(Nf4Fp8Compute, GemmsAreTheFp8GemmsOfTheDequantizedWeight) {
  model::Linear layer = fp8_compute_layer(128, 96, /*bias=*/true, 81);
  const at::Tensor w = quant::dequantize_nf4(*layer->nf4, at::kFloat);  // F32 [96, 128]
  const quant::Fp8Tensor wq = quant::quantize_fp8_rows(w);
  EXPECT_TRUE(at::equal(model::nf4_to_fp8({layer->nf4}, model::KernelPolicy{}).data, wq.data));

  const at::Tensor x = random_tensor({2, 5, 128}, 83, 1.0).requires_grad_(true);
  const at::Tensor y = layer->forward(x, model::KernelPolicy{});  // [2, 5, 96]
  const at::Tensor x2d = x.detach().reshape({10, 128});
  const at::Tensor y_fp8 = quant::fp8_gemm_reference(quant::quantize_fp8_rows(x2d), wq, at::kFloat) + layer->bias;
  EXPECT_TRUE(at::equal(y.detach().reshape({10, 96}), y_fp8));
  const at::Tensor y_dense = at::linear(x2d, w, layer->bias);
  EXPECT_LT(relative_error(y.reshape({10, 96}), y_dense), 0.05);
  EXPECT_GT(relative_error(y.reshape({10, 96}), y_dense), 0.0) << "the GEMM ran in F32, not FP8";

  const at::Tensor dy = random_tensor({2, 5, 96}, 85, 1.0);
  y.backward(dy);
  ASSERT_TRUE(x.grad().defined());
  const at::Tensor dy2d = dy.reshape({10, 96});
  const quant::Fp8Tensor dyq = quant::quantize_fp8_rows(dy2d * wq.scale.unsqueeze(0));
  const at::Tensor dx_fp8 = quant::fp8_gemm_reference(dyq, {wq.data.t(), at::ones({128})}, at::kFloat);
  EXPECT_TRUE(at::equal(x.grad().reshape({10, 128}), dx_fp8));
  EXPECT_LT(relative_error(x.grad().reshape({10, 128}), at::mm(dy2d, w)), 0.05);
}

TEST(Nf4Fp8Compute, GroupedProjectionsEqualEachLayerAlone) {
  std::vector<model::Linear> layers = {fp8_compute_layer(64, 64, false, 91), fp8_compute_layer(64, 32, false, 93),
                                       fp8_compute_layer(64, 32, false, 95)};
  std::vector<model::LinearImpl*> ptrs;
  for (auto& l : layers) ptrs.push_back(l.get());
  model::KernelPolicy grouped;
  grouped.group_gemms = true;
  const at::Tensor x = random_tensor({3, 7, 64}, 97, 1.0).requires_grad_(true);
  const model::LinearGroupOutput out = model::linear_group(x, ptrs, grouped);
  ASSERT_TRUE(out.joint.defined()) << "one GEMM over the stacked NF4 weights";
  const at::Tensor xs = x.detach().clone().requires_grad_(true);
  at::Tensor grouped_sum = at::zeros({}), alone_sum = at::zeros({});
  for (size_t i = 0; i < layers.size(); ++i) {
    const at::Tensor alone = layers[i]->forward(xs, model::KernelPolicy{});
    EXPECT_LT(max_diff(out.outputs[i], alone), 1e-5) << "layer " << i;
    grouped_sum = grouped_sum + out.outputs[i].square().sum();
    alone_sum = alone_sum + alone.square().sum();
  }
  grouped_sum.backward();
  alone_sum.backward();
  // The joint dy [N, 128] is quantized per row over all three layers' columns, each layer's alone over its own: the
  // scales differ, so the codes round differently.
  EXPECT_LT(relative_error(x.grad(), xs.grad()), 0.05);
}

TEST(Nf4Fp8Compute, SetNf4ComputeReachesEveryNf4ProjectionOfAModel) {
  const model::ModelArgs args = model::args_from_config(tiny_model_config("llama"), 50);
  model::Transformer dense(args), quantized(args);
  model::init_weights(dense, 0.2, 7, at::Device(at::kCPU), at::kFloat);
  EXPECT_TRUE(model::set_nf4_compute(dense, Nf4Compute::kFp8).empty());
  for (const auto& [path, layer] : dense.projections()) EXPECT_EQ(layer->nf4_compute, Nf4Compute::kDtype) << path;
  model::init_weights(quantized, 0.2, 7, at::Device(at::kCPU), at::kFloat, BaseQuantization::kNf4);
  const at::Tensor ids = at::arange(12, at::kLong).view({2, 6}) % 50;
  at::NoGradGuard no_grad;
  const at::Tensor in_dtype = quantized.forward(ids);
  EXPECT_TRUE(model::set_nf4_compute(quantized, Nf4Compute::kFp8).empty());
  for (const auto& [path, layer] : quantized.projections()) EXPECT_EQ(layer->nf4_compute, Nf4Compute::kFp8) << path;
  const at::Tensor in_fp8 = quantized.forward(ids);
  EXPECT_GT(max_diff(in_fp8, in_dtype), 0.0);
  // FP8 moves the logits of this random model by about as much as it moves the dense model's on an FP8 base (about
  // 10 % each: every GEMM input keeps 3 mantissa bits); the factor leaves room for the two bases' other roundings.
  model::Transformer fp8_base(args);
  model::init_weights(fp8_base, 0.2, 7, at::Device(at::kCPU), at::kFloat, BaseQuantization::kFp8);
  EXPECT_LT(relative_error(in_fp8, in_dtype), 1.5 * relative_error(fp8_base.forward(ids), dense.forward(ids)));
}

// _scaled_mm needs sizes in multiples of 16: an MLP 40 wide keeps its GEMMs in the compute dtype, and says so.
TEST(Nf4Fp8Compute, ProjectionsOfSizesFp8GemmsCannotTakeKeepTheComputeDtype) {
  ModelConfig cfg = tiny_model_config("llama");
  cfg.intermediate_size = 40;
  const model::ModelArgs args = model::args_from_config(cfg, 50);
  model::Transformer quantized(args);
  model::init_weights(quantized, 0.2, 7, at::Device(at::kCPU), at::kFloat, BaseQuantization::kNf4);
  const std::vector<std::string> left = model::set_nf4_compute(quantized, Nf4Compute::kFp8);
  EXPECT_EQ(left.size(), 6u);  // gate, up and down of both layers
  for (const auto& [path, layer] : quantized.projections()) {
    const bool mlp = path.find(".mlp.") != std::string::npos;
    EXPECT_EQ(layer->nf4_compute, mlp ? Nf4Compute::kDtype : Nf4Compute::kFp8) << path;
    EXPECT_EQ(std::count(left.begin(), left.end(), path), mlp ? 1 : 0) << path;
  }
}

// The kernels give the ATen path's bits: the codes and scales, and the transposed codes of stacked weights whose
// row blocks start inside a 64 x 64 tile (48 rows), with several 256-block groups of the double-quantized absmax.
// Both kernel families: the lookup-table ones (320 and 1,088 columns, blocks of 64-256: rows of 20 and 68 units of
// 16, fewer and more than a warp's 32) and the element-wise ones (2,064 columns: a last column tile of 16, rows of
// 258 groups of 8; blocks of 32), absmax blocks of 128 or 256 straddling rows.
TEST(Nf4Fp8Compute, KernelsGiveTheBitsOfTheAtenPath) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  if (!model::KernelPolicy::built_with_kernels()) GTEST_SKIP() << "built without the CUDA kernels";
  model::KernelPolicy kernels;
  kernels.kernels = true;
  uint64_t seed = 101;
  for (const bool double_quant : {true, false}) {
    for (const int64_t cols : {320, 1088, 2064}) {
      for (const int64_t blocksize : {32, 64, 128, 256}) {
        SCOPED_TRACE(::testing::Message() << "double " << double_quant << " cols " << cols << " block " << blocksize);
        model::Nf4Rows rows;
        for (const int64_t out : {304, 48, 16}) {
          at::Tensor w = random_tensor({out, cols}, seed++).to(at::kBFloat16).cuda();
          if (out == 16) w.narrow(0, 3, 1).zero_();  // a row of zeros: scale 1, zero codes
          rows.push_back(std::make_shared<const quant::Nf4Tensor>(quant::quantize_nf4(w, blocksize, double_quant)));
        }
        ASSERT_TRUE(model::nf4_to_fp8_available(rows));
        const quant::Fp8Tensor by_kernel = model::nf4_to_fp8(rows, kernels);  // [368, cols], [368]
        const quant::Fp8Tensor by_aten = model::nf4_to_fp8(rows, model::KernelPolicy{});
        EXPECT_TRUE(at::equal(by_kernel.data.view(at::kByte), by_aten.data.view(at::kByte)));
        EXPECT_TRUE(at::equal(by_kernel.scale, by_aten.scale));
        const at::Tensor codes_t = model::nf4_to_fp8_transposed_cuda(rows, by_kernel.scale);  // [cols, 368]
        EXPECT_TRUE(at::equal(codes_t.view(at::kByte), by_aten.data.t().contiguous().view(at::kByte)));
      }
    }
  }
}

// On an FP8 GPU the layer runs _scaled_mm over the kernels' codes: the same numbers as the F32 reference GEMM up to
// the GEMMs' accumulation order and bf16 outputs, forward and backward.
TEST(Nf4Fp8Compute, FastPathAgreesWithTheReferenceOnAnFp8Gpu) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  if (!model::KernelPolicy::built_with_kernels()) GTEST_SKIP() << "built without the CUDA kernels";
  if (!model::fp8_tensor_cores(at::Device(at::kCUDA))) GTEST_SKIP() << "no FP8 tensor cores";
  model::Linear layer(256, 128, false);
  {
    at::NoGradGuard no_grad;
    layer->weight.copy_(random_tensor({128, 256}, 111));
  }
  layer->to(at::kCUDA, at::kBFloat16);
  layer->weight.set_requires_grad(false);
  layer->quantize_nf4({}, at::kBFloat16, 64);
  layer->nf4_compute = Nf4Compute::kFp8;
  model::KernelPolicy kernels;
  kernels.kernels = true;
  const at::Tensor x = random_tensor({64, 256}, 113, 1.0).to(at::kBFloat16).cuda();
  const at::Tensor dy = random_tensor({64, 128}, 115, 1.0).to(at::kBFloat16).cuda();
  at::Tensor y[2], dx[2];
  for (int fast = 0; fast < 2; ++fast) {
    const at::Tensor xi = x.clone().requires_grad_(true);
    y[fast] = layer->forward(xi, fast ? kernels : model::KernelPolicy{});
    y[fast].backward(dy);
    dx[fast] = xi.grad();
  }
  // The same codes: only the accumulation order and the bf16 rounding of the outputs differ (~1e-3).
  EXPECT_LT(relative_error(y[1], y[0]), 5e-3);
  EXPECT_LT(relative_error(dx[1], dx[0]), 5e-3);
}

}  // namespace
}  // namespace ft::test

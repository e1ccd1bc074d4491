// FP8 training (train.fp8) against torchao's float8 training (third_party/requirements-bnb.txt pins torchao):
// tests/quant/ref/torchao_fp8_training_ref.py casts the same tensors and runs the same linear layers with torchao
// on the CPU. The casts must be equal bit for bit; the layer's output and gradients equal up to the summation order
// of the GEMMs (F32 sums, each rounded once to bf16). Skips when torchao cannot be imported by $FT_PYTHON.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/fp8_training.h"
#include "model/mode_guards.h"
#include "python_reference.h"
#include "quant/fp8_cast.h"
#include "support/tensor_bits.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

using quant::Fp8Format;

// Heavy-tailed values (a few outliers set the scales) in `dtype`.
at::Tensor heavy_tailed(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype, double std) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor normal = at::randn(shape, gen, at::kFloat);
  const at::Tensor spread = at::randn(shape, gen, at::kFloat).mul(0.7).exp();
  return (normal * spread * std).to(dtype);
}

struct LinearCase {
  std::string name;
  int64_t tokens, in, out;
  at::ScalarType weight_dtype = at::kBFloat16;  // F32: master weights, run under bf16 autocast
};

// Sizes of real projections in miniature, one whose token count is no multiple of 16, and F32 master weights.
const std::vector<LinearCase>& linear_cases() {
  static const std::vector<LinearCase> cases = {
      {"square", 64, 128, 128}, {"wide", 48, 64, 192}, {"odd", 37, 96, 32}, {"master", 32, 64, 48, at::kFloat}};
  return cases;
}

io::TensorMap inputs() {
  io::TensorMap in;
  in["cast.bf16_64x96"] = heavy_tailed({64, 96}, 1, at::kBFloat16, 0.02);
  in["cast.bf16_activations_16x4096"] = heavy_tailed({16, 4096}, 2, at::kBFloat16, 3.0);
  in["cast.f32_32x80"] = heavy_tailed({32, 80}, 3, at::kFloat, 1e-3);
  in["cast.bf16_gradients_24x64"] = heavy_tailed({24, 64}, 4, at::kBFloat16, 1e-7);  // tiny: scales far above 1
  in["cast.bf16_zeros_4x8"] = at::zeros({4, 8}, at::kBFloat16);
  uint64_t seed = 10;
  for (const auto& c : linear_cases()) {
    in["linear." + c.name + ".x"] = heavy_tailed({c.tokens, c.in}, seed++, at::kBFloat16, 1.0);
    in["linear." + c.name + ".w"] = heavy_tailed({c.out, c.in}, seed++, c.weight_dtype, 0.05);
    in["linear." + c.name + ".dy"] = heavy_tailed({c.tokens, c.out}, seed++, at::kBFloat16, 1e-4);
  }
  return in;
}

using Reference = PythonReference;

const Reference& reference() {
  static const Reference ref = run_python_reference("torchao_fp8_training_ref.py", inputs());
  return ref;
}

#define FT_REQUIRE_TORCHAO(ref)                                                                     \
  do {                                                                                              \
    if (!(ref).skip_reason.empty()) GTEST_SKIP() << "torchao is not usable: " << (ref).skip_reason; \
    ASSERT_TRUE((ref).failure.empty()) << (ref).failure;                                            \
  } while (false)

void expect_cast(const quant::Fp8Scaled& ours, const Reference& ref, const std::string& key) {
  SCOPED_TRACE(key);
  EXPECT_TRUE(bits_equal(ours.inverse, ref.tensors.at(key + ".inverse")));
  EXPECT_TRUE(bits_equal(ours.codes.view(at::kByte), ref.tensors.at(key + ".codes")));
}

TEST(Fp8TrainingTorchao, CastsEqualTorchaosDynamicFloat8BitForBit) {
  const Reference& ref = reference();
  FT_REQUIRE_TORCHAO(ref);
  for (const auto& [key, x] : inputs()) {
    if (key.rfind("cast.", 0) != 0) continue;
    const std::string name = key.substr(5);
    expect_cast(quant::cast_fp8_tensorwise(x, Fp8Format::kE4m3), ref, name + ".tensorwise_e4m3");
    expect_cast(quant::cast_fp8_tensorwise(x, Fp8Format::kE5m2), ref, name + ".tensorwise_e5m2");
    expect_cast(quant::cast_fp8_rowwise(x, Fp8Format::kE4m3, /*pow2=*/true), ref, name + ".rowwise_e4m3");
  }
}

// |ours - theirs| within a few bf16 roundings of the largest value: both sum the same F32 products in another order.
void expect_close(const at::Tensor& ours, const at::Tensor& theirs, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(ours.sizes(), theirs.sizes());
  EXPECT_EQ(ours.scalar_type(), theirs.scalar_type());
  const at::Tensor a = ours.to(at::kFloat), b = theirs.to(at::kFloat);
  const double scale = b.abs().max().item<double>();
  ASSERT_GT(scale, 0.0);
  EXPECT_LT((a - b).abs().max().item<double>(), 2e-2 * scale);
  EXPECT_LT((a - b).abs().mean().item<double>(), 1e-3 * scale);
}

TEST(Fp8TrainingTorchao, LinearOutputAndGradientsEqualTorchaosFloat8Linear) {
  const Reference& ref = reference();
  FT_REQUIRE_TORCHAO(ref);
  const io::TensorMap in = inputs();
  for (const auto& c : linear_cases()) {
    for (const auto& [recipe, tag] :
         {std::pair{Fp8Training::kTensorwise, "tensorwise"}, std::pair{Fp8Training::kRowwise, "rowwise"}}) {
      const std::string key = c.name + "." + tag;
      const at::Tensor x = in.at("linear." + c.name + ".x").clone().requires_grad_(true);
      const at::Tensor w = in.at("linear." + c.name + ".w").clone().requires_grad_(true);
      const model::AutocastGuard autocast(at::kCPU, at::kBFloat16, c.weight_dtype == at::kFloat);
      const at::Tensor y = model::fp8_training_linear(x, w, recipe, model::KernelPolicy{});
      y.backward(in.at("linear." + c.name + ".dy"));
      expect_close(y.detach(), ref.tensors.at(key + ".y"), key + ".y");
      expect_close(x.grad(), ref.tensors.at(key + ".dx"), key + ".dx");
      expect_close(w.grad(), ref.tensors.at(key + ".dw"), key + ".dw");
    }
  }
}

}  // namespace
}  // namespace ft::test

// Row-scaled FP8 against torchao (third_party/requirements-bnb.txt pins it): tests/quant/ref/torchao_fp8_ref.py
// quantizes the same inputs with torchao's per-row float8 primitives on the CPU; scales and codes must be equal bit
// for bit. Skips when torchao cannot be imported by the test Python ($FT_PYTHON).
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "python_reference.h"
#include "quant/fp8.h"
#include "support/tensor_bits.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

// Heavy-tailed rows (some outliers set a row's scale) in `dtype`.
at::Tensor random_rows(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype, double std) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor normal = at::randn(shape, gen, at::kFloat);
  const at::Tensor spread = at::randn(shape, gen, at::kFloat).mul(0.7).exp();
  return (normal * spread * std).to(dtype);
}

// Values that land exactly between two e4m3 neighbours once divided by the scale (row amax 448: scale 1), so the
// ties-to-even rounding shows, and values past the subnormal range.
at::Tensor ties_rows() {
  const std::vector<float> row = {448.0f, 1.0625f, 1.1875f, -3.25f, 17.0f, 0.0029296875f, -0.0009765625f, 240.0f};
  at::Tensor t = at::tensor(row).reshape({1, 8});
  return at::cat({t, t * 0.5f});
}

io::TensorMap inputs() {
  io::TensorMap in;
  in["f32_64x96"] = random_rows({64, 96}, 1, at::kFloat, 0.02);
  in["bf16_64x96"] = random_rows({64, 96}, 2, at::kBFloat16, 0.02);
  in["f16_32x80"] = random_rows({32, 80}, 3, at::kHalf, 0.02);
  in["bf16_activations_16x4096"] = random_rows({16, 4096}, 4, at::kBFloat16, 3.0);
  in["f32_tiny_8x16"] = random_rows({8, 16}, 5, at::kFloat, 1e-6);  // scales far below 1, subnormal codes
  in["f32_ties"] = ties_rows();
  return in;
}

using Reference = PythonReference;

const Reference& reference() {
  static const Reference ref = run_python_reference("torchao_fp8_ref.py", inputs());
  return ref;
}

TEST(Fp8Torchao, RowScalesAndCodesEqualTorchaosPerRowFloat8) {
  const Reference& ref = reference();
  if (!ref.skip_reason.empty()) GTEST_SKIP() << "torchao is not usable: " << ref.skip_reason;
  ASSERT_TRUE(ref.failure.empty()) << ref.failure;
  for (const auto& [name, x] : inputs()) {
    SCOPED_TRACE(name);
    const quant::Fp8Tensor q = quant::quantize_fp8_rows(x);
    EXPECT_TRUE(bits_equal(q.scale, ref.tensors.at(name + ".scale")));
    EXPECT_TRUE(bits_equal(q.data.view(at::kByte), ref.tensors.at(name + ".codes")));
  }
}

}  // namespace
}  // namespace ft::test

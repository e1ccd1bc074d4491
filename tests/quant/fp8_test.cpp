// Row-scaled FP8 (quant/fp8.h) on its own: the rounding bound, the row maximum at 448, rows of zeros, the checks,
// and the reference GEMM against the product of the dequantized operands. Bit equality with torchao:
// fp8_torchao_test.cpp.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "quant/fp8.h"
#include "util/error.h"

namespace ft::test {
namespace {

at::Tensor random_rows(std::vector<int64_t> shape, uint64_t seed, double std) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::kFloat) * at::randn(shape, gen, at::kFloat).exp() * std;
}

TEST(Fp8Rows, EachValueIsWithinHalfAnE4m3StepAndEachRowReaches448) {
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    const at::Tensor x = random_rows({50, 300}, 1, 0.02).to(dtype);
    const quant::Fp8Tensor q = quant::quantize_fp8_rows(x);
    ASSERT_EQ(q.data.scalar_type(), at::kFloat8_e4m3fn);
    ASSERT_EQ(q.scale.sizes(), at::IntArrayRef({50}));
    const at::Tensor codes = q.data.to(at::kFloat);
    EXPECT_TRUE(at::equal(codes.abs().amax(1), at::full({50}, 448.0f)));
    // Normal e4m3 values keep 3 mantissa bits (half a step: 2^-4 relative); subnormals step by 2^-9.
    const at::Tensor exact = x.to(at::kFloat) / q.scale.unsqueeze(1);
    const at::Tensor bound = exact.abs() * std::ldexp(1.0, -4) + std::ldexp(1.0, -10);
    EXPECT_TRUE((codes - exact).abs().le(bound).all().item<bool>());
    const at::Tensor back = quant::dequantize_fp8_rows(q, at::kFloat);
    EXPECT_TRUE(at::allclose(back, codes * q.scale.unsqueeze(1)));
  }
}

TEST(Fp8Rows, ARowOfZerosGetsScaleOneAndZeroCodes) {
  at::Tensor x = random_rows({3, 16}, 2, 1.0);
  x[1].zero_();
  const quant::Fp8Tensor q = quant::quantize_fp8_rows(x);
  EXPECT_EQ(q.scale[1].item<float>(), 1.0f);
  EXPECT_TRUE(q.data[1].to(at::kFloat).eq(0).all().item<bool>());
  EXPECT_TRUE(at::isfinite(q.data.to(at::kFloat)).all().item<bool>());
}

TEST(Fp8Rows, RefusesWhatIsNotAFloatMatrix) {
  EXPECT_THROW(quant::quantize_fp8_rows(at::ones({4})), Error);
  EXPECT_THROW(quant::quantize_fp8_rows(at::ones({2, 2}, at::kInt)), Error);
  EXPECT_THROW(quant::quantize_fp8_rows(at::ones({0, 8})), Error);
  quant::Fp8Tensor bad = quant::quantize_fp8_rows(at::ones({2, 8}));
  bad.scale = at::ones({3});
  EXPECT_THROW(quant::dequantize_fp8_rows(bad, at::kFloat), Error);
}

TEST(Fp8Rows, ReferenceGemmIsTheProductOfTheDequantizedOperands) {
  const quant::Fp8Tensor a = quant::quantize_fp8_rows(random_rows({12, 64}, 3, 1.0));
  const quant::Fp8Tensor b = quant::quantize_fp8_rows(random_rows({20, 64}, 4, 0.05));
  const at::Tensor want =
      at::mm(quant::dequantize_fp8_rows(a, at::kFloat), quant::dequantize_fp8_rows(b, at::kFloat).t());
  const at::Tensor got = quant::fp8_gemm_reference(a, b, at::kFloat);  // [12, 20]
  EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6));
  EXPECT_EQ(quant::fp8_gemm_reference(a, b, at::kBFloat16).scalar_type(), at::kBFloat16);
}

}  // namespace
}  // namespace ft::test

// FP8 training's linear (train.fp8, model/fp8_training.h): on the CPU, the forward is the cast-then-GEMM definition
// of quant/fp8_cast.h; on a GPU (skipped without one, or before sm_89), our cast kernels equal the ATen casts bit for
// bit and the _scaled_mm path agrees with the F32 reference GEMMs forward and backward. torchao's numbers are the
// reference of tests/quant/fp8_training_torchao_test.cpp.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/fp8_training.h"
#include "model/kernel_policy.h"
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

bool fp8_gpu() {
  return has_cuda() && model::fp8_tensor_cores(at::Device(at::kCUDA, 0));
}

TEST(Fp8Training, CastKernelsEqualTheAtenCastsBitForBit) {
  if (!fp8_gpu()) GTEST_SKIP() << "no CUDA device with FP8 tensor cores in a build with our kernels";
  for (const auto& shape : std::vector<std::vector<int64_t>>{{256, 4096}, {64, 96}, {48, 64}, {16, 20}}) {
    SCOPED_TRACE(std::to_string(shape[0]) + " x " + std::to_string(shape[1]));
    const at::Tensor x = random_bf16(shape, 3 + shape[1], 0.3).cuda();
    for (Fp8Format f : {Fp8Format::kE4m3, Fp8Format::kE5m2}) {
      const auto ours = model::fp8_cast_tensorwise_cuda(x, f), aten = quant::cast_fp8_tensorwise(x, f);
      EXPECT_TRUE(bits_equal(ours.inverse, aten.inverse));
      EXPECT_TRUE(bits_equal(ours.codes.view(at::kByte), aten.codes.view(at::kByte)));
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

double relative_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>() / b.to(at::kFloat).abs().max().item<double>();
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

}  // namespace
}  // namespace ft::test

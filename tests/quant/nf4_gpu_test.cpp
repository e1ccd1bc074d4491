// NF4 on CUDA tensors: the same ATen ops as on the CPU, so the same bits, except the offset of the double-quantized
// absmax (a mean: the device's reduction sums in another order). Skips without a GPU.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "quant/nf4.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

using quant::Nf4Tensor;

at::Tensor random_weight(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor normal = at::randn(shape, gen, at::kFloat);
  const at::Tensor spread = at::randn(shape, gen, at::kFloat).mul(0.5).exp();
  return (normal * spread * 0.02).to(dtype);
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  return at::equal(a.cpu(), b.cpu());
}

TEST(Nf4Cuda, QuantizeAndDequantizeOnCudaGiveTheCpuBits) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    std::vector<int64_t> shape;
    int64_t blocksize;
    at::ScalarType dtype;
  };
  const std::vector<Case> cases = {{{128, 64}, 64, at::kFloat},  {{96, 80}, 64, at::kBFloat16},
                                   {{5, 47}, 64, at::kBFloat16}, {{300, 256}, 64, at::kFloat},
                                   {{40, 100}, 128, at::kHalf},  {{1024, 1024}, 64, at::kBFloat16}};
  uint64_t seed = 21;
  for (const auto& c : cases) {
    const at::Tensor w = random_weight(c.shape, seed++, c.dtype);
    w.view({-1}).slice(0, 0, c.blocksize).zero_();  // an all-zero first block
    SCOPED_TRACE(::testing::Message() << "shape [" << c.shape[0] << ", " << c.shape[1] << "] " << c.dtype);
    const at::Tensor gpu_w = w.cuda();

    const Nf4Tensor cpu = quant::quantize_nf4(w, c.blocksize, false);
    const Nf4Tensor gpu = quant::quantize_nf4(gpu_w, c.blocksize, false);
    EXPECT_TRUE(gpu.packed.is_cuda());
    EXPECT_TRUE(same(gpu.packed, cpu.packed));
    EXPECT_TRUE(same(gpu.absmax, cpu.absmax));
    EXPECT_TRUE(same(quant::dequantize_nf4(gpu, c.dtype), quant::dequantize_nf4(cpu, c.dtype)));

    // Double quantization: the codes of (absmax - offset) and absmax2 are the CPU kernel's for the device's offset.
    const Nf4Tensor gpu_dq = quant::quantize_nf4(gpu_w, c.blocksize, true);
    EXPECT_TRUE(same(gpu_dq.packed, cpu.packed));
    EXPECT_NEAR(gpu_dq.offset.item<float>(), cpu.absmax.mean().item<float>(),
                1e-6 * cpu.absmax.abs().max().item<float>());
    const auto [codes, absmax2] =
        quant::quantize_blockwise_dynamic(cpu.absmax - gpu_dq.offset.cpu(), quant::kAbsmaxBlocksize);
    EXPECT_TRUE(same(gpu_dq.absmax_codes, codes));
    EXPECT_TRUE(same(gpu_dq.absmax2, absmax2));
    Nf4Tensor on_cpu = gpu_dq;
    on_cpu.packed = gpu_dq.packed.cpu();
    on_cpu.absmax_codes = gpu_dq.absmax_codes.cpu();
    on_cpu.absmax2 = gpu_dq.absmax2.cpu();
    on_cpu.offset = gpu_dq.offset.cpu();
    EXPECT_TRUE(same(quant::dequantize_nf4(gpu_dq, c.dtype), quant::dequantize_nf4(on_cpu, c.dtype)));
  }
}

}  // namespace
}  // namespace ft::test

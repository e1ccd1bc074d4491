// NF4 behaviour that needs no Python reference: the packing, the round-trip error, the block layout, the dynamic
// map's shape, the memory cost and the errors. Equality with bitsandbytes is nf4_bnb_test.cpp.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "quant/nf4.h"
#include "util/error.h"

namespace ft::test {
namespace {

using quant::Nf4Tensor;

at::Tensor random_weight(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype = at::kFloat) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  // Heavy-tailed, as real weights: most blocks small, a few outliers.
  const at::Tensor normal = at::randn(shape, gen, at::kFloat);
  const at::Tensor spread = at::randn(shape, gen, at::kFloat).mul(0.5).exp();
  return (normal * spread * 0.02).to(dtype);
}

// Half the larger gap next to each NF4 value: the most a value quantized to that code can be off, in units of its
// block's absmax. F32 [16].
at::Tensor half_gap_per_code() {
  const at::Tensor code = quant::nf4_code();
  const at::Tensor gaps = code.slice(0, 1) - code.slice(0, 0, -1);  // F32 [15]
  const at::Tensor left = at::cat({gaps.slice(0, 0, 1), gaps});     // gap below each code (the first: its upper)
  const at::Tensor right = at::cat({gaps, gaps.slice(0, -1)});      // gap above each code (the last: its lower)
  return at::maximum(left, right) / 2;
}

// The 4-bit code of every element, unpacked: I64 [n].
at::Tensor unpacked_codes(const Nf4Tensor& q) {
  return at::stack({at::bitwise_right_shift(q.packed, 4), at::bitwise_and(q.packed, 15)}, 1)
      .reshape({-1})
      .slice(0, 0, q.numel())
      .to(at::kLong);
}

// Each element's block absmax: F32 [n].
at::Tensor absmax_per_element(const at::Tensor& block_absmax, int64_t blocksize, int64_t n) {
  return block_absmax.repeat_interleave(blocksize).slice(0, 0, n);
}

TEST(Nf4, PacksTheFirstElementIntoTheHighNibbleAndPadsAnOddCountWithTheZeroCode) {
  const Nf4Tensor q = quant::quantize_nf4(at::tensor({-1.0f, 1.0f, 0.0f}), 64, false);
  ASSERT_EQ(q.packed.numel(), 2);
  // codes: -1 -> 0, 1 -> 15, 0 -> 7, padding -> 7
  EXPECT_EQ(q.packed[0].item<uint8_t>(), 0x0F);
  EXPECT_EQ(q.packed[1].item<uint8_t>(), 0x77);
  EXPECT_EQ(q.absmax.item<float>(), 1.0f);
  EXPECT_TRUE(at::equal(quant::dequantize_nf4(q, at::kFloat), at::tensor({-1.0f, 1.0f, 0.0f})));
}

TEST(Nf4, WeightsOnTheNf4GridRoundTripExactly) {
  // Every block holds each NF4 value times the block's scale, and +-1 times it, so absmax is the scale itself.
  const at::Tensor scales = at::tensor({0.5f, 0.03125f, 3.0f, 0.0078125f});
  const at::Tensor grid = quant::nf4_code().repeat({4});                            // F32 [64]
  const at::Tensor w = (grid.unsqueeze(0) * scales.unsqueeze(1)).reshape({8, 32});  // F32 [8, 32], 4 blocks
  const Nf4Tensor q = quant::quantize_nf4(w, 64, false);
  EXPECT_TRUE(at::equal(q.absmax, scales));
  EXPECT_TRUE(at::equal(quant::dequantize_nf4(q, at::kFloat), w));
}

TEST(Nf4, RoundTripErrorIsWithinHalfAnNf4StepOfTheBlockAbsmax) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t blocksize;
    at::ScalarType dtype;
  };
  const std::vector<Case> cases = {{{128, 64}, 64, at::kFloat},    {{96, 80}, 64, at::kFloat},
                                   {{3, 50}, 64, at::kBFloat16},   {{1, 7}, 64, at::kFloat},
                                   {{40, 100}, 128, at::kHalf},    {{2, 3000}, 4096, at::kFloat},
                                   {{300, 256}, 64, at::kBFloat16}};
  uint64_t seed = 11;
  for (const auto& c : cases) {
    for (bool double_quant : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "shape [" << c.shape[0] << ", " << c.shape[1] << "] blocksize "
                                        << c.blocksize << " " << c.dtype << (double_quant ? " double-quantized" : ""));
      const at::Tensor w = random_weight(c.shape, seed++, c.dtype);
      const Nf4Tensor q = quant::quantize_nf4(w, c.blocksize, double_quant);
      const at::Tensor back = quant::dequantize_nf4(q, at::kFloat);  // F32, exact products code * absmax
      ASSERT_EQ(back.sizes(), w.sizes());
      const int64_t n = w.numel();
      const at::Tensor magnitude = w.to(at::kFloat).reshape({-1}).abs();  // F32 [n]
      // The exact absmax of each block, and the one the dequantization used (different when double-quantized).
      const at::Tensor true_absmax =
          at::constant_pad_nd(magnitude, {0, q.blocks() * c.blocksize - n}).view({q.blocks(), c.blocksize}).amax(1);
      const at::Tensor used = absmax_per_element(quant::block_absmax(q), c.blocksize, n);
      const at::Tensor truth = absmax_per_element(true_absmax, c.blocksize, n);
      const at::Tensor codes = unpacked_codes(q);
      // |code * used - w| <= |code * truth - w| + |code| * |used - truth|, the first term at most half a step.
      const at::Tensor code_value = quant::nf4_code().index_select(0, codes).abs();
      const at::Tensor bound =
          half_gap_per_code().index_select(0, codes) * truth * (1 + 1e-5) + code_value * (used - truth).abs() + 1e-30;
      const at::Tensor err = (back.reshape({-1}) - w.to(at::kFloat).reshape({-1})).abs();
      const at::Tensor over = (err > bound).nonzero();
      ASSERT_EQ(over.numel(), 0) << "element " << over[0].item<int64_t>() << ": error "
                                 << err[over[0].item<int64_t>()].item<float>() << " > bound "
                                 << bound[over[0].item<int64_t>()].item<float>();
      // The double-quantized absmax is off by at most half a step of the dynamic map (its widest step, near
      // +-1, is 0.0140625) plus one cell of the CPU kernel's lookup table (2 / 65535), times the absmax of its
      // 256 blocks.
      if (double_quant) {
        const at::Tensor per_block_bound =
            absmax_per_element(q.absmax2, quant::kAbsmaxBlocksize, q.blocks()) * (0.0140625 / 2 + 2.0 / 65535) +
            true_absmax * 1e-6;
        EXPECT_TRUE((quant::block_absmax(q) - true_absmax).abs().le(per_block_bound).all().item<bool>());
      }
    }
  }
}

TEST(Nf4, TheTailBlockHasItsOwnAbsmax) {
  at::Tensor w = at::zeros({1, 70});
  w.index_put_({0, 3}, -0.25f);
  w.index_put_({0, 66}, 2.0f);  // in the 6-element tail block
  const Nf4Tensor q = quant::quantize_nf4(w, 64, false);
  ASSERT_EQ(q.blocks(), 2);
  EXPECT_TRUE(at::equal(q.absmax, at::tensor({0.25f, 2.0f})));
  EXPECT_TRUE(at::equal(quant::dequantize_nf4(q, at::kFloat), w));
}

TEST(Nf4, TheTailBlockDividesByItsAbsmaxWhereFullBlocksMultiplyByItsReciprocal) {
  // float32 bit patterns of a pair where x * (1 / absmax) and x / absmax straddle the midpoint between NF4 codes 5 and
  // 6 (-0.1379...): bitsandbytes' full blocks get code 5, its tail block code 6.
  const float absmax = at::tensor({1074794652}, at::kInt).view(at::kFloat).item<float>();
  const float x = at::tensor({-1096879578}, at::kInt).view(at::kFloat).item<float>();
  at::Tensor w = at::zeros({66});
  w.index_put_({0}, absmax);
  w.index_put_({1}, x);
  w.index_put_({64}, absmax);
  w.index_put_({65}, x);
  const Nf4Tensor q = quant::quantize_nf4(w, 64, false);
  EXPECT_EQ(q.packed[0].item<uint8_t>(), 0xF5);   // full block: 15 (absmax itself), 5
  EXPECT_EQ(q.packed[32].item<uint8_t>(), 0xF6);  // tail block: 15, 6
}

TEST(Nf4, AnAllZeroBlockHasAbsmaxZeroAndComesBackAsZeros) {
  at::Tensor w = random_weight({4, 64}, 3);
  w[1].zero_();
  for (bool double_quant : {false, true}) {
    const Nf4Tensor q = quant::quantize_nf4(w, 64, double_quant);
    if (!double_quant) {
      EXPECT_EQ(q.absmax[1].item<float>(), 0.0f);
    }
    // Every code of the zero block is the code of 0.0, so it comes back as zeros whatever absmax it gets back.
    EXPECT_TRUE(at::equal(q.packed.slice(0, 32, 64), at::full({32}, 0x77, at::kByte)));
    EXPECT_TRUE(at::equal(quant::dequantize_nf4(q, at::kFloat)[1], at::zeros({64})));
  }
}

TEST(Nf4, DequantizeReturnsTheRequestedDtypeRoundedOnceFromF32) {
  const at::Tensor w = random_weight({16, 64}, 5, at::kBFloat16);
  const Nf4Tensor q = quant::quantize_nf4(w, 64, true);
  const at::Tensor f32 = quant::dequantize_nf4(q, at::kFloat);
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    const at::Tensor out = quant::dequantize_nf4(q, dtype);
    EXPECT_EQ(out.scalar_type(), dtype);
    EXPECT_TRUE(at::equal(out, f32.to(dtype)));
  }
}

TEST(Nf4, DynamicMapHas256AscendingSignedValuesFromMinus0_993To1) {
  const at::Tensor m = quant::dynamic_map();
  ASSERT_EQ(m.numel(), 256);
  EXPECT_TRUE((m.slice(0, 1) > m.slice(0, 0, -1)).all().item<bool>());
  EXPECT_EQ(m[255].item<float>(), 1.0f);
  EXPECT_NEAR(m[0].item<float>(), -0.99297, 1e-5);
  EXPECT_EQ(m.lt(0).sum().item<int64_t>(), 127);
  EXPECT_EQ(m.eq(0).sum().item<int64_t>(), 1);
  // The smallest magnitudes are 1e-6 * the midpoint of linspace(0.1, 1, 2): 5.5e-7.
  EXPECT_NEAR(m.abs().masked_select(m != 0).min().item<float>(), 5.5e-7, 1e-12);
}

TEST(Nf4, DoubleQuantizationStoresOneByteAnAbsmaxAndOneF32PerEvery256) {
  const Nf4Tensor q = quant::quantize_nf4(random_weight({1024, 1024}, 9), 64, true);
  EXPECT_EQ(q.packed.numel(), 1024 * 1024 / 2);
  EXPECT_EQ(q.absmax_codes.numel(), 16384);
  EXPECT_EQ(q.absmax_codes.scalar_type(), at::kByte);
  EXPECT_EQ(q.absmax2.numel(), 64);
  EXPECT_EQ(q.offset.numel(), 1);
  EXPECT_FALSE(q.absmax.defined());
  EXPECT_EQ(q.storage_bytes(), 1024 * 1024 / 2 + 16384 + 64 * 4 + 4);  // 4.127 bits a weight
  const Nf4Tensor plain = quant::quantize_nf4(random_weight({1024, 1024}, 9), 64, false);
  EXPECT_EQ(plain.storage_bytes(), 1024 * 1024 / 2 + 16384 * 4);  // 4.5 bits a weight
}

TEST(Nf4, QuantizationIsTheSameForEveryLayoutOfTheInput) {
  const at::Tensor w = random_weight({64, 96}, 13);
  const at::Tensor strided = w.t().contiguous().t();  // same values, column-major
  const Nf4Tensor a = quant::quantize_nf4(w, 64, true);
  const Nf4Tensor b = quant::quantize_nf4(strided, 64, true);
  EXPECT_TRUE(at::equal(a.packed, b.packed));
  EXPECT_TRUE(at::equal(a.absmax_codes, b.absmax_codes));
  EXPECT_TRUE(at::equal(a.absmax2, b.absmax2));
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected ft::Error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Nf4, BadInputThrowsErrorNamingTheProblem) {
  const at::Tensor w = random_weight({4, 64}, 1);
  expect_error([] { quant::quantize_nf4(at::Tensor()); }, "undefined");
  expect_error([] { quant::quantize_nf4(at::ones({4, 64}, at::kInt)); }, "must be F32, BF16 or F16, got Int");
  expect_error([] { quant::quantize_nf4(at::ones({4, 64}, at::kDouble)); }, "got Double");
  expect_error([] { quant::quantize_nf4(at::ones({0, 64})); }, "no elements");
  for (int64_t bs : {0, -64, 8, 48, 100, 8192}) {
    expect_error([&] { quant::quantize_nf4(w, bs); },
                 "blocksize must be a power of two from 16 to 4096, got " + std::to_string(bs));
  }

  const Nf4Tensor good = quant::quantize_nf4(w, 64, true);
  expect_error([&] { quant::dequantize_nf4(good, at::kInt); }, "dtype must be F32, BF16 or F16");
  Nf4Tensor q = good;
  q.packed = q.packed.slice(0, 1);
  expect_error([&] { quant::dequantize_nf4(q, at::kFloat); }, "packed must be U8 [128]");
  q = good;
  q.shape = {4, 65};
  expect_error([&] { quant::dequantize_nf4(q, at::kFloat); }, "packed must be U8 [130]");
  q = good;
  q.absmax_codes = q.absmax_codes.to(at::kFloat);
  expect_error([&] { quant::dequantize_nf4(q, at::kFloat); }, "absmax_codes must be U8 [4]");
  q = good;
  q.absmax2 = at::Tensor();
  expect_error([&] { quant::dequantize_nf4(q, at::kFloat); }, "absmax2 must be F32 [1]");
  q = good;
  q.offset = at::Tensor();
  expect_error([&] { quant::dequantize_nf4(q, at::kFloat); }, "offset must be one F32 value");
  q = good;
  q.blocksize = 128;  // 2 blocks, but 4 absmax codes
  expect_error([&] { quant::dequantize_nf4(q, at::kFloat); }, "absmax_codes must be U8 [2]");
  const Nf4Tensor plain = quant::quantize_nf4(w, 64, false);
  q = plain;
  q.absmax = q.absmax.slice(0, 1);
  expect_error([&] { quant::dequantize_nf4(q, at::kFloat); }, "absmax must be F32 [4]");
  q = plain;
  q.absmax_codes = good.absmax_codes;
  expect_error([&] { quant::dequantize_nf4(q, at::kFloat); }, "both absmax and absmax_codes");
}

}  // namespace
}  // namespace ft::test

// NF4 against bitsandbytes (third_party/requirements-bnb.txt pins it): tests/quant/ref/bnb_ref.py quantizes the same
// inputs with bitsandbytes.functional.quantize_4bit on the CPU and dequantizes them; every tensor must be equal bit
// for bit. Skips when bitsandbytes cannot be imported by the test Python ($FT_PYTHON).
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "python_reference.h"
#include "quant/nf4.h"
#include "support/tensor_bits.h"
#include "support/test_support.h"

namespace ft::test {
namespace {

using quant::Nf4Tensor;

struct Case {
  std::string name;  // "<input>.<b64|b128|...>.<plain|dq>"
  at::Tensor w;
  int64_t blocksize;
  bool double_quant;
};

at::Tensor random_weight(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor normal = at::randn(shape, gen, at::kFloat);
  const at::Tensor spread = at::randn(shape, gen, at::kFloat).mul(0.5).exp();  // heavy tails: outlier blocks
  return (normal * spread * 0.02).to(dtype);
}

// Blocks of 64 that put values exactly on every NF4 midpoint (after scaling by the block's absmax 1 or 0.5): ties
// go to the lower code.
at::Tensor midpoint_weight() {
  const at::Tensor code = quant::nf4_code();
  const at::Tensor mid = (code.slice(0, 0, -1) + code.slice(0, 1)) / 2;                      // F32 [15]
  const at::Tensor block = at::cat({at::ones({1}), mid, -mid, mid * 0.5, at::zeros({18})});  // F32 [64]
  return at::stack({block, block * 0.5}).reshape({2, 64});
}

// Four full blocks [absmax, x, 0, ...] and a 2-element tail block holding the first pair again. The pairs are ones
// where x * (1 / absmax) and x / absmax fall on different sides of an NF4 midpoint (bitsandbytes scales full blocks
// the first way and the tail block the second way), so the tail's x gets another code than block 0's.
at::Tensor division_tail_weight() {
  const std::vector<std::pair<int32_t, int32_t>> pairs = {// float32 bit patterns: absmax, x
                                                          {1074794652, -1096879578},
                                                          {1076801261, 1057895682},
                                                          {1077563960, -1075606477},
                                                          {1080631458, 1068860631}};
  at::Tensor bits = at::zeros({4 * 64 + 2}, at::kInt);
  for (size_t b = 0; b < pairs.size(); ++b) {
    bits[static_cast<int64_t>(b) * 64].fill_(pairs[b].first);
    bits[static_cast<int64_t>(b) * 64 + 1].fill_(pairs[b].second);
  }
  bits[256].fill_(pairs[0].first);
  bits[257].fill_(pairs[0].second);
  return bits.view(at::kFloat).reshape({2, 129});
}

std::vector<Case> all_cases() {
  struct Input {
    std::string name;
    at::Tensor w;
    std::vector<int64_t> blocksizes;
  };
  std::vector<Input> inputs = {
      {"f32_128x64", random_weight({128, 64}, 1, at::kFloat), {64, 128}},
      {"bf16_128x64", random_weight({128, 64}, 2, at::kBFloat16), {64, 128}},
      {"f32_96x80", random_weight({96, 80}, 3, at::kFloat), {64, 128}},  // rows not whole blocks
      {"bf16_96x80", random_weight({96, 80}, 4, at::kBFloat16), {64}},
      {"f32_1x7", random_weight({1, 7}, 5, at::kFloat), {64}},         // odd count, one short block
      {"f32_3x50", random_weight({3, 50}, 6, at::kFloat), {64, 128}},  // a 22-element tail block (b64)
      {"bf16_5x47", random_weight({5, 47}, 7, at::kBFloat16), {64}},   // odd count and a tail
      {"f16_40x100", random_weight({40, 100}, 8, at::kHalf), {128}},
      {"f32_300x256", random_weight({300, 256}, 9, at::kFloat), {64}},       // 1200 blocks: 5 absmax blocks, a tail
      {"bf16_3x2000", random_weight({3, 2000}, 10, at::kBFloat16), {4096}},  // one short block of 4096
      {"f32_midpoints", midpoint_weight(), {64}},
      {"f32_constant", at::full({64, 64}, 0.5f), {64}},  // every absmax equals the offset: absmax2 = 0
      {"f32_division_tail", division_tail_weight(), {64}},
      {"bf16_6x48x64", random_weight({6, 48, 64}, 14, at::kBFloat16), {64}},  // an MoE experts' stack [E, N, K]
  };
  at::Tensor zero_block = random_weight({4, 64}, 11, at::kFloat);
  zero_block[2].zero_();
  inputs.push_back({"f32_zero_block", zero_block, {64}});
  at::Tensor zero_tail = random_weight({2, 40}, 12, at::kFloat);
  zero_tail[1].slice(0, 24).zero_();  // the 16-element tail block
  inputs.push_back({"f32_zero_tail", zero_tail, {64}});
  at::Tensor bf16_zero_block = random_weight({8, 96}, 13, at::kBFloat16);
  bf16_zero_block.view({-1}).slice(0, 128, 192).zero_();
  inputs.push_back({"bf16_zero_block", bf16_zero_block, {64, 128}});

  std::vector<Case> cases;
  for (const auto& in : inputs) {
    for (int64_t bs : in.blocksizes) {
      for (bool dq : {false, true}) {
        cases.push_back({in.name + ".b" + std::to_string(bs) + (dq ? ".dq" : ".plain"), in.w, bs, dq});
      }
    }
  }
  return cases;
}

// bnb_ref.py's outputs for all_cases(), or why there are none.
using Reference = PythonReference;

const Reference& reference() {
  static const Reference ref = [] {
    io::TensorMap inputs;
    nlohmann::json jobs = {{"cases", nlohmann::json::array()}};
    for (const auto& c : all_cases()) {
      inputs[c.name] = c.w;
      jobs["cases"].push_back({{"name", c.name}, {"blocksize", c.blocksize}, {"double_quant", c.double_quant}});
    }
    return run_python_reference("bnb_ref.py", inputs, {{"jobs.json", jobs.dump()}});
  }();
  return ref;
}

#define REQUIRE_REFERENCE()                                                                        \
  const Reference& ref = reference();                                                              \
  if (!ref.skip_reason.empty()) GTEST_SKIP() << "bitsandbytes is not usable: " << ref.skip_reason; \
  ASSERT_TRUE(ref.failure.empty()) << ref.failure

// bitsandbytes' quantization of `c`, in our struct.
Nf4Tensor theirs(const Reference& ref, const Case& c) {
  Nf4Tensor q;
  q.shape = c.w.sizes().vec();
  q.blocksize = c.blocksize;
  q.packed = ref.tensors.at(c.name + ".packed");
  if (c.double_quant) {
    q.absmax_codes = ref.tensors.at(c.name + ".absmax");
    q.absmax2 = ref.tensors.at(c.name + ".absmax2");
    q.offset = ref.tensors.at(c.name + ".offset").reshape({});
  } else {
    q.absmax = ref.tensors.at(c.name + ".absmax");
  }
  return q;
}

TEST(Nf4Bitsandbytes, PackedCodesAndF32AbsmaxEqualBitsandbytes) {
  REQUIRE_REFERENCE();
  for (const auto& c : all_cases()) {
    if (c.double_quant) continue;
    SCOPED_TRACE(c.name);
    const Nf4Tensor q = quant::quantize_nf4(c.w, c.blocksize, false);
    EXPECT_TRUE(bits_equal(q.packed, ref.tensors.at(c.name + ".packed")));
    EXPECT_TRUE(bits_equal(q.absmax, ref.tensors.at(c.name + ".absmax")));
  }
}

TEST(Nf4Bitsandbytes, DoubleQuantizedAbsmaxCodesAbsmax2AndOffsetEqualBitsandbytes) {
  REQUIRE_REFERENCE();
  for (const auto& c : all_cases()) {
    if (!c.double_quant) continue;
    SCOPED_TRACE(c.name);
    const Nf4Tensor q = quant::quantize_nf4(c.w, c.blocksize, true);
    EXPECT_TRUE(bits_equal(q.packed, ref.tensors.at(c.name + ".packed")));
    EXPECT_TRUE(bits_equal(q.absmax_codes, ref.tensors.at(c.name + ".absmax")));
    EXPECT_TRUE(bits_equal(q.absmax2, ref.tensors.at(c.name + ".absmax2")));
    EXPECT_TRUE(bits_equal(q.offset.reshape({1}), ref.tensors.at(c.name + ".offset")));
    // The F32 absmax that dequantization restores: dequantize_blockwise(codes, absmax2) + offset.
    EXPECT_TRUE(bits_equal(quant::block_absmax(q), ref.tensors.at(c.name + ".absmax_restored")));
  }
}

TEST(Nf4Bitsandbytes, DequantizedWeightsEqualBitsandbytesBitForBit) {
  REQUIRE_REFERENCE();
  for (const auto& c : all_cases()) {
    SCOPED_TRACE(c.name);
    const at::Tensor& expected = ref.tensors.at(c.name + ".dequant");
    // Ours end to end, and our dequantization of bitsandbytes' own quantized state.
    const Nf4Tensor q = quant::quantize_nf4(c.w, c.blocksize, c.double_quant);
    EXPECT_TRUE(bits_equal(quant::dequantize_nf4(q, c.w.scalar_type()), expected));
    EXPECT_TRUE(bits_equal(quant::dequantize_nf4(theirs(ref, c), c.w.scalar_type()), expected));
    // bitsandbytes' CPU kernel called with the 2-D shape agrees where every row is a whole number of blocks (see
    // bnb_ref.py for the rows that are not).
    if (c.w.size(-1) % c.blocksize == 0) {
      EXPECT_TRUE(bits_equal(quant::dequantize_nf4(q, c.w.scalar_type()), ref.tensors.at(c.name + ".dequant_rows")));
    }
  }
}

TEST(Nf4Bitsandbytes, DynamicMapsAndNf4CodeEqualBitsandbytes) {
  REQUIRE_REFERENCE();
  EXPECT_TRUE(bits_equal(quant::dynamic_map(), ref.tensors.at("dynamic_map")));
  EXPECT_TRUE(bits_equal(quant::unsigned_dynamic_map(), ref.tensors.at("unsigned_dynamic_map")));
  EXPECT_TRUE(bits_equal(quant::nf4_code(), ref.tensors.at("nf4_code")));
}

}  // namespace
}  // namespace ft::test

#include "quant/nf4.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "quant/float_types.h"
#include "util/error.h"

namespace ft::quant {
namespace {

// bitsandbytes' NF4 table (get_4bit_type("nf4")): quantiles of N(0, 1) scaled to [-1, 1], exactly 0 at index 7.
constexpr std::array<float, 16> kNf4Values = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// bitsandbytes clamps an all-zero block's absmax to this before dividing by it (float32: a subnormal, ~1e-38).
constexpr double kTinyAbsmax = 1e-38;

// The 8-bit CPU kernel looks codes up in a table of this many evenly spaced points of [-1, 1].
constexpr int64_t kLutSize = 65536;

std::string dtype_name(at::ScalarType t) {
  return c10::toString(t);
}

void check_blocksize(int64_t blocksize, const char* what) {
  const bool power_of_two = blocksize > 0 && (blocksize & (blocksize - 1)) == 0;
  FT_CHECK(power_of_two && blocksize >= 16 && blocksize <= 4096,
           std::string(what) + ": blocksize must be a power of two from 16 to 4096, got " + std::to_string(blocksize));
}

// Midpoints between neighbouring NF4 values, (a + b) / 2 in float32: F32 [15], CPU.
const at::Tensor& nf4_midpoints() {
  static const at::Tensor midpoints = [] {
    std::array<float, 15> mid{};
    for (size_t i = 0; i < mid.size(); ++i) mid[i] = (kNf4Values[i] + kNf4Values[i + 1]) / 2.0f;
    return at::tensor(at::ArrayRef<float>(mid.data(), mid.size()), at::kFloat);
  }();
  return midpoints;
}

// The CPU kernel's lookup table (bitsandbytes csrc/cpu_ops.cpp): entry i stands for the point -1 + 2i / 65535 of
// [-1, 1] and holds the number of dynamic-map midpoints below it, i.e. the nearest code of that point.
// U8 [65536], CPU.
const at::Tensor& dynamic_lut() {
  static const at::Tensor lut = [] {
    const at::Tensor code = dynamic_map().contiguous();  // F32 [256]
    const float* c = code.data_ptr<float>();
    std::array<float, 255> mid{};
    for (size_t i = 0; i < mid.size(); ++i) mid[i] = 0.5f * (c[i] + c[i + 1]);
    at::Tensor table = at::empty({kLutSize}, at::kByte);  // U8 [65536]
    auto* out = table.data_ptr<uint8_t>();
    for (int64_t i = 0; i < kLutSize; ++i) {
      const float point = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kLutSize - 1);
      out[i] = static_cast<uint8_t>(std::lower_bound(mid.begin(), mid.end(), point) - mid.begin());
    }
    return table;
  }();
  return lut;
}

void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* name) {
  FT_CHECK(t.device() == ref.device(), std::string("dequantize_nf4: ") + name + " is on " + t.device().str() +
                                           ", the packed codes on " + ref.device().str());
}

void check_nf4(const Nf4Tensor& q) {
  check_blocksize(q.blocksize, "dequantize_nf4");
  for (int64_t d : q.shape) FT_CHECK(d >= 0, "dequantize_nf4: negative dimension in the shape");
  const int64_t n = q.numel();
  FT_CHECK(n > 0, "dequantize_nf4: the shape has no elements");
  FT_CHECK(
      q.packed.defined() && q.packed.scalar_type() == at::kByte && q.packed.dim() == 1 &&
          q.packed.numel() == (n + 1) / 2,
      "dequantize_nf4: packed must be U8 [" + std::to_string((n + 1) / 2) + "] for " + std::to_string(n) + " elements");
  const int64_t blocks = q.blocks();
  if (!q.double_quant()) {
    FT_CHECK(
        q.absmax.defined() && q.absmax.scalar_type() == at::kFloat && q.absmax.dim() == 1 && q.absmax.numel() == blocks,
        "dequantize_nf4: absmax must be F32 [" + std::to_string(blocks) + "] (or absmax_codes set)");
    check_same_device(q.absmax, q.packed, "absmax");
    return;
  }
  FT_CHECK(!q.absmax.defined(), "dequantize_nf4: both absmax and absmax_codes are set");
  FT_CHECK(q.blocksize2 > 0, "dequantize_nf4: blocksize2 must be positive, got " + std::to_string(q.blocksize2));
  const int64_t blocks2 = (blocks + q.blocksize2 - 1) / q.blocksize2;
  FT_CHECK(q.absmax_codes.scalar_type() == at::kByte && q.absmax_codes.dim() == 1 && q.absmax_codes.numel() == blocks,
           "dequantize_nf4: absmax_codes must be U8 [" + std::to_string(blocks) + "]");
  FT_CHECK(q.absmax2.defined() && q.absmax2.scalar_type() == at::kFloat && q.absmax2.dim() == 1 &&
               q.absmax2.numel() == blocks2,
           "dequantize_nf4: absmax2 must be F32 [" + std::to_string(blocks2) + "]");
  FT_CHECK(q.offset.defined() && q.offset.scalar_type() == at::kFloat && q.offset.numel() == 1,
           "dequantize_nf4: offset must be one F32 value");
  check_same_device(q.absmax_codes, q.packed, "absmax_codes");
  check_same_device(q.absmax2, q.packed, "absmax2");
  check_same_device(q.offset, q.packed, "offset");
}

}  // namespace

int64_t Nf4Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Nf4Tensor::storage_bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor* t : {&packed, &absmax, &absmax_codes, &absmax2, &offset}) {
    if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
  }
  return bytes;
}

const at::Tensor& nf4_code() {
  static const at::Tensor code = at::tensor(at::ArrayRef<float>(kNf4Values.data(), kNf4Values.size()), at::kFloat);
  return code;
}

namespace {

// create_dynamic_map(signed, max_exponent_bits=7, total_bits=8). For each exponent i = 0..6 the midpoints of float32
// linspace(0.1, 1, k + 1), k = 2^i signed or 2^(i + 1) unsigned, times 10^(i - 6) (and, signed, times -10^(i - 6); a
// float32 product with the scale rounded to float32, as torch multiplies a tensor by a Python float); then 0 and 1;
// sorted. 2 * 127 + 2 or 254 + 2 = 256 values, so neither map has padding zeros or -1.
at::Tensor make_dynamic_map(bool is_signed) {
  constexpr int kExponentBits = 7;  // max_exponent_bits
  std::vector<at::Tensor> parts;
  for (int i = 0; i < kExponentBits; ++i) {
    const int64_t fraction_items = (int64_t{1} << (is_signed ? i : i + 1)) + 1;
    const at::Tensor bounds = at::linspace(0.1, 1.0, fraction_items, at::kFloat);       // F32 [k + 1]
    const at::Tensor means = (bounds.slice(0, 0, -1) + bounds.slice(0, 1)) / 2.0;       // F32 [k]
    const double scale = std::pow(10.0, static_cast<double>(i - (kExponentBits - 1)));  // Python's 10 ** (i - 6)
    parts.push_back(means * scale);
    if (is_signed) parts.push_back(means * -scale);
  }
  parts.push_back(at::tensor({0.0f, 1.0f}, at::kFloat));
  return std::get<0>(at::sort(at::cat(parts)));  // F32 [256]
}

}  // namespace

const at::Tensor& dynamic_map() {
  static const at::Tensor map = make_dynamic_map(/*is_signed=*/true);
  return map;
}

const at::Tensor& unsigned_dynamic_map() {
  static const at::Tensor map = make_dynamic_map(/*is_signed=*/false);
  return map;
}

std::pair<at::Tensor, at::Tensor> quantize_blockwise_dynamic(const at::Tensor& x, int64_t blocksize) {
  FT_CHECK(x.scalar_type() == at::kFloat && x.dim() == 1, "quantize_blockwise_dynamic: x must be F32 [n]");
  FT_CHECK(blocksize > 0, "quantize_blockwise_dynamic: blocksize must be positive");
  const int64_t n = x.numel();
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  // Zero padding leaves every block's absmax as it is; the padded codes are dropped at the end.
  const at::Tensor padded = at::constant_pad_nd(x, {0, blocks * blocksize - n}).view({blocks, blocksize});
  const at::Tensor absmax = padded.abs().amax(1);  // F32 [blocks]
  // x * (1 / absmax) in float32; an all-zero block gets 0 here and code 0 below.
  const at::Tensor inv = at::where(absmax > 0, absmax.reciprocal(), at::zeros_like(absmax));  // F32 [blocks]
  const at::Tensor v = (padded * inv.unsqueeze(1)).clamp(-1.0, 1.0);                          // F32 [blocks, blocksize]
  // The table entry nearest to v: (v + 1) * 0.5 * 65535 + 0.5, each step rounded to float32, truncated.
  // (Fused into one multiply-add or not, the index is the same: checked for every float32 in [0, 1].)
  const at::Tensor entry = (((v + 1.0) * 0.5) * static_cast<double>(kLutSize - 1) + 0.5)
                               .to(at::kInt)
                               .clamp(0, kLutSize - 1);  // I32 [blocks, blocksize]; clamp: NaN inputs
  at::Tensor codes = dynamic_lut().to(x.device()).index_select(0, entry.reshape({-1}));  // U8 [blocks * blocksize]
  const at::Tensor zero_block = (absmax == 0).unsqueeze(1).expand({blocks, blocksize}).reshape({-1});
  codes = at::where(zero_block, at::zeros_like(codes), codes).slice(0, 0, n);  // U8 [n]
  return {codes, absmax};
}

at::Tensor dequantize_blockwise_dynamic(const at::Tensor& codes, const at::Tensor& absmax, int64_t blocksize) {
  FT_CHECK(codes.scalar_type() == at::kByte && codes.dim() == 1, "dequantize_blockwise_dynamic: codes must be U8 [n]");
  FT_CHECK(blocksize > 0, "dequantize_blockwise_dynamic: blocksize must be positive");
  const int64_t n = codes.numel();
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  FT_CHECK(absmax.scalar_type() == at::kFloat && absmax.numel() == blocks,
           "dequantize_blockwise_dynamic: absmax must be F32 [" + std::to_string(blocks) + "]");
  const at::Tensor values = dynamic_map().to(codes.device()).index_select(0, codes.to(at::kLong));  // F32 [n]
  const at::Tensor padded = at::constant_pad_nd(values, {0, blocks * blocksize - n}).view({blocks, blocksize});
  return (padded * absmax.reshape({blocks, 1})).reshape({-1}).slice(0, 0, n);  // F32 [n]
}

Nf4Tensor quantize_nf4(const at::Tensor& w, int64_t blocksize, bool double_quant) {
  FT_CHECK(w.defined(), "quantize_nf4: the weight is undefined");
  FT_CHECK(is_supported_float(w.scalar_type()),
           "quantize_nf4: the weight must be F32, BF16 or F16, got " + dtype_name(w.scalar_type()));
  FT_CHECK(w.numel() > 0, "quantize_nf4: the weight has no elements");
  check_blocksize(blocksize, "quantize_nf4");

  Nf4Tensor q;
  q.shape = w.sizes().vec();
  q.blocksize = blocksize;

  const at::Tensor x = w.detach().reshape({-1}).to(at::kFloat);  // F32 [n]
  const int64_t n = x.numel();
  const int64_t full_blocks = n / blocksize;
  const int64_t full = full_blocks * blocksize;

  // bitsandbytes treats the full blocks and the short tail block differently, and so do we:
  // - full blocks: absmax stored as is (0 for an all-zero block), values scaled by x * (1 / max(absmax, 1e-38));
  // - tail block: absmax stored already clamped to 1e-38, values scaled by x / absmax (a true division).
  std::vector<at::Tensor> absmax_parts, scaled_parts;
  if (full_blocks > 0) {
    const at::Tensor blocks = x.slice(0, 0, full).view({full_blocks, blocksize});  // F32 [full_blocks, blocksize]
    const at::Tensor amax = blocks.abs().amax(1);                                  // F32 [full_blocks]
    const at::Tensor inv = amax.clamp_min(kTinyAbsmax).reciprocal().unsqueeze(1);  // F32 [full_blocks, 1]
    scaled_parts.push_back((blocks * inv).clamp(-1.0, 1.0).reshape({-1}));         // F32 [full]
    absmax_parts.push_back(amax);
  }
  if (full < n) {
    const at::Tensor tail = x.slice(0, full);                          // F32 [n - full]
    const at::Tensor amax = tail.abs().amax().clamp_min(kTinyAbsmax);  // F32 []
    scaled_parts.push_back((tail / amax).clamp(-1.0, 1.0));
    absmax_parts.push_back(amax.reshape({1}));
  }
  // An odd count is padded with 0.0 (code 7) to fill the last byte.
  if (n % 2 != 0) scaled_parts.push_back(at::zeros({1}, x.options()));
  const at::Tensor scaled = at::cat(scaled_parts);  // F32 [2 * ceil(n/2)]

  // Nearest NF4 value: the number of midpoints strictly below the scaled value (a tie goes to the lower code).
  const at::Tensor codes = at::bucketize(scaled, nf4_midpoints().to(x.device()), /*out_int32=*/true, /*right=*/false)
                               .to(at::kByte);                 // U8 [2 * ceil(n/2)]
  const at::Tensor high = codes.slice(0, 0, c10::nullopt, 2);  // U8 [ceil(n/2)]: elements 0, 2, 4, ...
  const at::Tensor low = codes.slice(0, 1, c10::nullopt, 2);   // U8 [ceil(n/2)]: elements 1, 3, 5, ...
  q.packed = at::bitwise_or(at::bitwise_left_shift(high, 4), low);

  const at::Tensor absmax = at::cat(absmax_parts);  // F32 [blocks]
  if (!double_quant) {
    q.absmax = absmax;
    return q;
  }
  q.offset = absmax.mean();  // F32 []
  auto [absmax_codes, absmax2] = quantize_blockwise_dynamic(absmax - q.offset, kAbsmaxBlocksize);
  q.absmax_codes = absmax_codes;  // U8 [blocks]
  q.absmax2 = absmax2;            // F32 [ceil(blocks/256)]
  q.blocksize2 = kAbsmaxBlocksize;
  return q;
}

at::Tensor block_absmax(const Nf4Tensor& q) {
  if (!q.double_quant()) return q.absmax;
  // Two roundings, as bitsandbytes: the product (dequantize_blockwise), then the sum with the offset.
  return dequantize_blockwise_dynamic(q.absmax_codes, q.absmax2, q.blocksize2) + q.offset.reshape({});
}

at::Tensor dequantize_nf4(const Nf4Tensor& q, at::ScalarType dtype) {
  FT_CHECK(is_supported_float(dtype), "dequantize_nf4: dtype must be F32, BF16 or F16, got " + dtype_name(dtype));
  check_nf4(q);
  const int64_t n = q.numel();
  const int64_t blocks = q.blocks();

  const at::Tensor high = at::bitwise_right_shift(q.packed, 4);                                     // U8 [ceil(n/2)]
  const at::Tensor low = at::bitwise_and(q.packed, 15);                                             // U8 [ceil(n/2)]
  const at::Tensor codes = at::stack({high, low}, 1).reshape({-1}).slice(0, 0, n);                  // U8 [n]
  const at::Tensor values = nf4_code().to(q.packed.device()).index_select(0, codes.to(at::kLong));  // F32 [n]

  const at::Tensor padded = at::constant_pad_nd(values, {0, blocks * q.blocksize - n}).view({blocks, q.blocksize});
  const at::Tensor scaled = padded * block_absmax(q).reshape({blocks, 1});  // F32 [blocks, blocksize]
  return scaled.reshape({-1}).slice(0, 0, n).to(dtype).reshape(q.shape);
}

}  // namespace ft::quant

// NF4 (4-bit NormalFloat, QLoRA) weights, bit for bit as bitsandbytes 0.50.2 stores them on the CPU
// (bitsandbytes.functional.quantize_4bit(w, blocksize, quant_type="nf4", compress_statistics) and dequantize_4bit).
//
// The format. The weight is flattened (row-major) and cut into blocks of `blocksize` elements; the last block is
// shorter when numel is not a multiple of the block. Each element becomes the index (0..15) of the nearest value of
// the NF4 code table (nf4_code()) to w / absmax(block), two indices a byte, the first element in the high nibble.
// The per-block absmax is kept either as F32, or double-quantized ("compress_statistics"): its mean (offset) is
// subtracted and the centred values are quantized again, 8 bits each in blocks of 256, with the signed dynamic map
// (dynamic_map()) and one F32 absmax per 256 blocks. Dequantizing: code[index] * absmax, computed in F32 and rounded
// once to the requested dtype; a double-quantized absmax is dynamic_map[code] * absmax2 + offset.
//
// Plain ATen ops, so CPU and CUDA tensors both work. Equality with bitsandbytes is tested on the CPU
// (tests/quant); on CUDA the ops are the same, except that the mean behind `offset` is a device reduction whose
// summation order differs from the CPU's (the last bit of the offset may differ between devices). The reference
// is bitsandbytes' CPU path on purpose: its CUDA kernels are another implementation (a threshold tree for NF4, a
// reciprocal for the tail block too, the exact nearest 8-bit code), so its own CPU and CUDA bits can differ.
// Non-finite weights are not rejected: a NaN or an infinity makes its block's absmax and values NaN or infinite
// (with double quantization every block's, through the offset).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace ft::quant {

// Second-level block of the double-quantized absmax (bitsandbytes' fixed choice).
constexpr int64_t kAbsmaxBlocksize = 256;
// bitsandbytes' default NF4 block (Linear4bit, transformers' BitsAndBytesConfig): model.quantize's.
constexpr int64_t kNf4Blocksize = 64;

struct Nf4Tensor {
  // bitsandbytes' names in brackets (QuantState; the HF / PEFT state-dict keys where they differ).
  at::Tensor packed;           // U8 [ceil(n/2)]: element 2i in the high nibble, 2i+1 in the low one; an odd n
                               // pads the last low nibble with the code of 0.0 (7)  [the packed weight, [.., 1]]
  std::vector<int64_t> shape;  // the weight's shape, n = its product  [shape]
  int64_t blocksize = 64;      // [blocksize]

  // Without double quantization:
  at::Tensor absmax;  // F32 [blocks]  [absmax]
  // With double quantization (absmax left undefined):
  at::Tensor absmax_codes;  // U8 [blocks]: indices into dynamic_map()  [absmax, U8]
  at::Tensor absmax2;       // F32 [ceil(blocks/256)]: absmax of each 256 centred absmax values  [nested_absmax]
  at::Tensor offset;        // F32 []: mean of the F32 absmax, subtracted before quantizing  [nested_offset]
  int64_t blocksize2 = kAbsmaxBlocksize;  // [nested_blocksize]

  bool double_quant() const { return absmax_codes.defined(); }
  int64_t numel() const;
  int64_t blocks() const { return (numel() + blocksize - 1) / blocksize; }
  // Bytes of the packed codes and the absmax layout (what the quantized weight costs in memory).
  int64_t storage_bytes() const;
};

// The 16 NF4 values, ascending, from -1 to 1 (bitsandbytes' get_4bit_type("nf4")). F32 [16], CPU.
const at::Tensor& nf4_code();

// bitsandbytes' create_dynamic_map(signed=True): 8-bit dynamic-exponent code, 256 ascending values in
// [-0.99297, 1], built as bitsandbytes builds it (float32 linspace of fractions scaled by 1e-6 .. 1). F32 [256], CPU.
const at::Tensor& dynamic_map();
// create_dynamic_map(signed=False): 256 ascending values in [0, 1], twice as fine as the signed map's positive half
// (bitsandbytes' 8-bit optimizers quantize Adam's second moment with it). F32 [256], CPU.
const at::Tensor& unsigned_dynamic_map();

// Quantizes `w` (F32, BF16 or F16, any shape and device, numel > 0) with blocks of `blocksize` (a power of two,
// 16..4096; bitsandbytes itself accepts 32..4096). The result lives on w's device.
// Throws ft::Error for an undefined, empty or non-floating `w` or a bad blocksize.
Nf4Tensor quantize_nf4(const at::Tensor& w, int64_t blocksize = kNf4Blocksize, bool double_quant = true);

// The block absmax as F32 [blocks]: `absmax`, or the double-quantized one restored (dynamic_map[code] * absmax2 +
// offset, rounded after the product and after the sum, as bitsandbytes).
at::Tensor block_absmax(const Nf4Tensor& q);

// The weight back, in `dtype` (F32, BF16 or F16), shape q.shape, on q's device. Throws ft::Error when the fields
// of `q` do not fit together (sizes, dtypes, devices) or `dtype` is not one of those.
at::Tensor dequantize_nf4(const Nf4Tensor& q, at::ScalarType dtype);

// Blockwise 8-bit quantization with the dynamic map, as bitsandbytes' CPU kernel (quantize_blockwise on the CPU,
// used for the double-quantized absmax): per block of `blocksize`, absmax = max |x|; x * (1 / absmax) clamped to
// [-1, 1] picks its code through a 65536-entry table over [-1, 1] (not the exact nearest code); an all-zero block
// gets code 0. Returns {codes U8 [n], absmax F32 [ceil(n/blocksize)]} for x F32 [n].
std::pair<at::Tensor, at::Tensor> quantize_blockwise_dynamic(const at::Tensor& x, int64_t blocksize);
// dynamic_map[codes] * absmax per block: F32 [n].
at::Tensor dequantize_blockwise_dynamic(const at::Tensor& codes, const at::Tensor& absmax, int64_t blocksize);

}  // namespace ft::quant

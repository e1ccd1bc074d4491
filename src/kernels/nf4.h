// Dequantization of NF4 weights (quant/nf4.h) on CUDA, for the frozen NF4 base of QLoRA (model/nf4_linear.h): the
// GEMM reads a dense copy that lives only while the GEMM runs, in the compute dtype or as FP8 codes with row scales
// (model.nf4_compute: fp8).
// Plain CUDA: no LibTorch header; the caller passes raw pointers and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// One NF4 weight of n elements in blocks of `blocksize`. The block absmax is either F32 (`absmax`), or
// double-quantized: dynamic_map[absmax_codes[b]] * absmax2[b / blocksize2] + *offset, each step rounded to F32.
struct Nf4View {
  const uint8_t* packed;        // U8 [n / 2]: element 2i in the high nibble
  int64_t n;                    // elements; a multiple of 8
  int64_t blocksize;            // a multiple of 8
  const float* absmax;          // F32 [blocks], or null when double-quantized
  const uint8_t* absmax_codes;  // U8 [blocks]
  const float* absmax2;         // F32 [ceil(blocks / blocksize2)]
  const float* offset;          // F32 [1], on the device
  int64_t blocksize2;
};

// The lookup tables, quant::nf4_code() and quant::dynamic_map(), passed by value: each thread block copies them to
// shared memory, where the lookups of different codes by the threads of a warp do not serialize as they would in
// constant memory.
struct Nf4Tables {
  float code[16];
  float dynamic_map[256];
};

// out[i] = code[nibble i] * absmax(block of i), in F32 with one rounding to `dtype`, for i < n: bit for bit what
// quant::dequantize_nf4 computes. `out` is aligned to 8 elements.
void nf4_dequantize(const Nf4View& w, const Nf4Tables& tables, void* out, DType dtype, void* stream);

// The weight [rows, cols] (w.n = rows * cols; cols a multiple of 8) dequantized in F32 as above, then quantized per
// row to e4m3 as kernels/fp8.h's fp8_quantize_rows does with F32 input: scale[r] = amax(|row r|) times the F32
// reciprocal of 448 (1 for a row of zeros), code = e4m3(v / scale) with an IEEE division, saturated, rounded to
// nearest even. codes U8 [rows, cols], scale F32 [rows].
void nf4_to_fp8_rows(const Nf4View& w, const Nf4Tables& tables, int64_t rows, int64_t cols, uint8_t* codes,
                     float* scale, void* stream);

// The same codes transposed, from the scales nf4_to_fp8_rows wrote: codes_t[c * ld + r] for r < rows, c < cols
// (rows and cols multiples of 16, ld and codes_t's address multiples of 4). Several weights stacked by rows write
// their column blocks of one [cols, ld] buffer.
void nf4_to_fp8_transposed(const Nf4View& w, const Nf4Tables& tables, int64_t rows, int64_t cols, const float* scale,
                           uint8_t* codes_t, int64_t ld, void* stream);

}  // namespace ft::kernels

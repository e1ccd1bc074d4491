// The casts of FP8 training (model/fp8_training.h) on BF16 or F32 tensors (F32 master weights), as
// quant/fp8_cast.h computes them (torchao's dynamic scaling): scale = max / max(amax, 1e-12) in F64, then F32; code =
// fp8(saturate(F32(x) * scale)), rounded to nearest even; `inverse` = 1 / scale (IEEE), what the scaled GEMM takes.
// Power-of-two scales (rows, columns) keep only the scale's exponent: torchao's exp2(floor(log2(scale))), except within
// 2^-24 below a power of two, where F32's log2 rounds up to the integer and torchao keeps the higher power. Plain CUDA:
// no LibTorch header; the caller passes raw pointers and a stream.
#pragma once

#include <cstdint>

namespace ft::kernels {

enum class Fp8Code { kE4m3, kE5m2 };

// One scale for x [rows, cols] (BF16, or F32 when `f32`: F32 master weights cast as they are, as torchao does): its
// amax in *amax (computed into that F32, which the call zeroes first, unless amax_known: the kernel that wrote x
// wrote its amax there), then *inverse and the codes in both layouts from one more read: codes [rows, cols] and
// codes_t [cols, ld_t] (x^T's codes, for the GEMMs that read x transposed; ld_t >= rows a multiple of 16, columns
// rows .. ld_t - 1 zero codes). cols a multiple of 4; codes and codes_t 16-byte aligned, x 16-byte (BF16) or 32-byte
// (F32) aligned.
void fp8_cast_tensorwise_both(const void* x, bool f32, int64_t rows, int64_t cols, Fp8Code code, float* amax,
                              bool amax_known, uint8_t* codes, uint8_t* codes_t, int64_t ld_t, float* inverse,
                              void* stream);
// One power-of-two scale per row of x [rows, cols] (BF16, or F32 when `f32`): codes [rows, cols], inverse [rows].
void fp8_cast_rows_pow2(const void* x, bool f32, int64_t rows, int64_t cols, Fp8Code code, uint8_t* codes,
                        float* inverse, void* stream);
// One power-of-two scale per column of x [rows, cols] (BF16, or F32 when `f32`; 16-byte aligned), written transposed:
// codes_t [cols, rows] (x^T's codes), inverse [cols]; amax_scratch F32 [cols] (the call zeroes it); rows and cols
// multiples of 4.
void fp8_cast_columns_pow2(const void* x, bool f32, int64_t rows, int64_t cols, Fp8Code code, float* amax_scratch,
                           uint8_t* codes_t, float* inverse, void* stream);

}  // namespace ft::kernels

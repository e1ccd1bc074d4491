// Dropout whose mask is a function of (seed, offset, element index), for LoRA's adapter dropout
// (model/lora_dropout.h): the backward pass draws the mask again instead of keeping it, and keeps no dropped copy of
// the input either.
// Plain CUDA: no LibTorch header; the caller passes raw pointers and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// The mask: element i is kept when the 16-bit half (i % 2: low, then high) of word (i % 8) / 2 of one
// Philox-4x32-10 block (key = seed; counter: offset / 4 in its low 64 bits, i / 8 in its high 64, as
// curand_init(seed, i / 8, offset) would start) is below round((1 - p) 2^16). Every element has its own draw, the
// same for every dtype, launch shape and pointer alignment, so a call with the same (seed, offset) reproduces the
// mask; p takes effect rounded to a multiple of 2^-16 (0.05 keeps with probability 0.949997). Each call uses 4 words
// of each subsequence: offset is a multiple of 4 and the next call starts at offset + 4 or later (the PyTorch
// generator's philox_cuda_state(4) gives both).
inline constexpr uint64_t kDropoutWordsPerCall = 4;

// out[i] = keep(i) ? in[i] / (1 - p) : 0 for i < n (F32 math, one rounding; in == out is allowed).
void dropout_apply(const void* in, void* out, int64_t n, float p, uint64_t seed, uint64_t offset, DType dtype,
                   void* stream);

// The same mask on two arrays in one pass (one draw per element): out_a = dropout(in_a), out_b = dropout(in_b);
// in_x == out_x is allowed. The backward of the adapter's down projection: the dropped input for A's gradient and
// the masked input gradient.
void dropout_apply2(const void* in_a, void* out_a, const void* in_b, void* out_b, int64_t n, float p, uint64_t seed,
                    uint64_t offset, DType dtype, void* stream);

}  // namespace ft::kernels

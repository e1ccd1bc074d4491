// FP8 casts with dynamic scales for training (train.fp8, model/fp8_training.h), as torchao's float8 training
// computes them (torchao 0.18, float8_utils.py: tensor_to_amax, amax_to_scale, to_fp8_saturated):
//   amax  = max |x| over the tensor (tensorwise) or over each row (rowwise);
//   scale = fp8_max / max(amax, 1e-12), divided in F64 and rounded to F32; rowwise, torchao's ROWWISE recipe
//           rounds it down to a power of two (exp2(floor(log2(scale)))), so scaling is exact;
//   codes = saturate(F32(x) * scale) rounded to the nearest FP8 value (ties to even).
// A scaled GEMM then multiplies the codes with the reciprocals of the scales (`inverse`). Plain ATen ops (CPU and
// CUDA); kernels/fp8.h computes the same bits in one pass on CUDA.
#pragma once

#include <ATen/ATen.h>

namespace ft::quant {

enum class Fp8Format {
  kE4m3,  // float8_e4m3fn: max 448, 3 mantissa bits (weights, activations; ROWWISE's gradients too)
  kE5m2,  // float8_e5m2: max 57344, 2 mantissa bits (TENSORWISE's gradients)
};

at::ScalarType fp8_dtype(Fp8Format f);
float fp8_max(Fp8Format f);

// An FP8 copy of a 2-D tensor: codes [rows, cols] ~= x * scale, with `inverse` = 1 / scale as the GEMM takes it.
struct Fp8Scaled {
  at::Tensor codes;    // F8E4M3FN or F8E5M2 [rows, cols]
  at::Tensor inverse;  // F32: [] (tensorwise) or [rows] (rowwise)
};

// A trainable weight's amax (max |w|) as the optimizer step that last wrote the weight computed it beside the new
// values (optim::AdamW::write_amax_into), so that the weight's tensorwise cast skips its amax pass. It describes the
// weight while the weight's version counter still reads `version`. In-place ATen ops (a checkpoint's weights copied
// in, the other step paths) advance the counter; what writes a weight behind ATen's back must advance it too (our
// step kernels, dist::broadcast_from_owners' in-place receive), and set_data or writes through data_ptr() do not:
// nothing that runs after the first step writes weights that way.
struct KnownAmax {
  at::Tensor amax;       // F32 [] on the weight's device; undefined before the first step that wrote it
  int64_t version = -1;  // the weight's _version() right after that step

  // amax when it still describes `weight`, else undefined.
  at::Tensor of(const at::Tensor& weight) const;
};

// x [rows, cols] (F32/BF16/F16, any device), one scale for the whole tensor.
Fp8Scaled cast_fp8_tensorwise(const at::Tensor& x, Fp8Format format);
// x [rows, cols], one scale per row; `pow2`: rounded down to a power of two.
Fp8Scaled cast_fp8_rowwise(const at::Tensor& x, Fp8Format format, bool pow2);

// codes [rows_a, k] . codes [rows_b, k]^T scaled by both operands' inverses, summed in F32 and rounded once to
// `dtype`: what the scaled FP8 GEMM computes, for devices without one and for tests.
at::Tensor fp8_scaled_gemm_reference(const Fp8Scaled& a, const Fp8Scaled& b, at::ScalarType dtype);

}  // namespace ft::quant

// Residual add fused into RMSNorm, one CUDA kernel per direction, for the fused decoder path of model/norm.h:
//   sum = residual + delta (F32, rounded once to the residual's dtype: the new residual stream),
//   normed = sum * rsqrt(mean(sum^2) + eps) * (weight + weight_offset) (F32, rounded once to the output dtype;
//   weight_offset 1 is Gemma's (1 + weight)).
// Plain CUDA: no LibTorch header; the caller passes raw pointers of contiguous rows and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// The element types of one call. Supported: all four equal (F32, BF16 or F16), and an F32 residual and weight with a
// half-precision delta (F32 master weights under autocast) and an output of the delta's type or F32.
struct NormTypes {
  DType residual, delta, weight, out;
};
bool add_rms_norm_supported(NormTypes types);

struct AddRmsNormForward {
  const void* residual;  // [rows, cols] residual dtype
  const void* delta;     // [rows, cols] delta dtype, or nullptr: sum = residual (plain RMSNorm, `sum` not written)
  const void* weight;    // [cols] weight dtype
  void* sum;             // [rows, cols] residual dtype (output)
  void* normed;          // [rows, cols] out dtype (output)
  float* rstd;           // F32 [rows] (output): rsqrt(mean(sum^2) + eps)
  int64_t rows, cols;
  float eps;
  float weight_offset;  // added to each weight in F32: 0, or 1 for Gemma's (1 + weight)
};

struct AddRmsNormBackward {
  const void* grad_sum;     // [rows, cols] residual dtype, or nullptr (no gradient from the residual stream)
  const void* grad_normed;  // [rows, cols] out dtype
  const void* sum;          // [rows, cols] residual dtype, saved by the forward
  const void* weight;       // [cols] weight dtype
  const float* rstd;        // F32 [rows], saved by the forward
  void* grad_residual;      // [rows, cols] residual dtype (output): grad_sum + rmsnorm'(grad_normed)
  void* grad_delta;         // [rows, cols] delta dtype (output), or nullptr: not written
  float* weight_partial;    // F32 [add_rms_norm_backward_blocks(...), cols] workspace, or nullptr: no weight gradient
  void* grad_weight;        // [cols] weight dtype (output): sum over rows of grad_normed * sum * rstd; with partial
  int64_t rows, cols;
  float weight_offset;  // the forward's
};

// Launches the forward on `stream`. Throws std::runtime_error for unsupported types or a failed launch.
void add_rms_norm_forward(const AddRmsNormForward& args, NormTypes types, void* stream);

// How many row blocks the backward splits the rows into: the rows of its weight_partial workspace. Fixed for a
// device, shape and types, so the weight gradient's reduction order (and its bits) repeats run after run.
int64_t add_rms_norm_backward_blocks(int64_t rows, int64_t cols, NormTypes types);

// Launches the backward on `stream`: one pass over the rows (per-block F32 partials of the weight gradient, no atomics)
// and, with weight_partial, a second kernel that sums the partials in a fixed order.
void add_rms_norm_backward(const AddRmsNormBackward& args, NormTypes types, void* stream);

}  // namespace ft::kernels

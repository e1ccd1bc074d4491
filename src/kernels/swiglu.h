// SwiGLU (silu(gate) * up) and GeGLU (gelu_tanh(gate) * up) in one CUDA kernel per direction, for the fused MLP
// path of model/swiglu.h.
// Plain CUDA: no LibTorch header; the caller passes raw pointers, row strides (in elements) and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// A [rows, cols] matrix whose rows are `ld` elements apart and whose columns are contiguous.
struct Matrix {
  void* data;
  int64_t ld;
};

// The activation of the gate: silu (SwiGLU) or the tanh approximation of GELU (GeGLU, Gemma's gelu_pytorch_tanh).
enum class GateAct { kSilu, kGeluTanh };

// out = act(gate) * up, computed in F32 and rounded once. gate, up: [rows, cols] (may be the two halves of one
// [rows, 2 * cols] projection); out: [rows, cols]. out_amax, when not null, names an F32 the caller zeroed, which gets
// max |out| (for the FP8 cast of out: model/fp8_training.h).
void swiglu_forward(Matrix gate, Matrix up, Matrix out, int64_t rows, int64_t cols, DType dtype, void* stream,
                    GateAct act = GateAct::kSilu, float* out_amax = nullptr);

// Where swiglu_backward writes max |d_gate| and max |d_up| (F32s the caller zeroed; both null, or both set; one
// address for both when d_gate and d_up are the halves of one tensor).
struct GradAmax {
  float* d_gate = nullptr;
  float* d_up = nullptr;
};

// d_gate = d_out * up * act'(gate), d_up = d_out * act(gate), in F32, rounded once each.
void swiglu_backward(Matrix d_out, Matrix gate, Matrix up, Matrix d_gate, Matrix d_up, int64_t rows, int64_t cols,
                     DType dtype, void* stream, GateAct act = GateAct::kSilu, GradAmax amax = {});

}  // namespace ft::kernels

// AdamW with Kahan-compensated updates for bf16/fp16 parameters (optim/optimizer.h, optimizer.kahan_summation) in
// one pass over each parameter: it reads the parameter, its gradient, exp_avg, exp_avg_sq and the compensation once
// and writes them once, where the ATen composite runs some twenty elementwise ops with F32 temporaries.
// Plain CUDA: no LibTorch header; the caller passes raw pointers and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// One parameter's tensors, n elements each, contiguous. param, grad, exp_avg and compensation are of the
// parameter's dtype (bf16 or fp16); exp_avg_sq is F32.
struct KahanAdamWTensors {
  void* param;
  const void* grad;
  void* exp_avg;
  float* exp_avg_sq;
  void* compensation;
  int64_t n;
};

// Device scalars (F32 [] each, read on the device, so nothing syncs with the host): step is the step count after
// this step's increment; grad_scale (nullable) divides the gradient; found_inf (nullable) skips the step when
// non-zero, leaving every tensor as it was.
struct KahanAdamWScalars {
  const float* step;
  const float* grad_scale;
  const float* found_inf;
  double beta1, beta2;  // double, so 1 - beta and the bias corrections are exact to F32
  float lr, eps, weight_decay;
};

// m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2 (F32);
// y = -lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) - lr wd p + c;
// p' = round(p + y); c' = round(y - (p' - p)). All arithmetic in F32.
void adamw_kahan_step(const KahanAdamWTensors& t, const KahanAdamWScalars& s, DType dtype, void* stream);

}  // namespace ft::kernels

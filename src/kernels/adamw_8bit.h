// AdamW with 8-bit moments, as bitsandbytes' AdamW8bit (optimizer.name: adamw_8bit; optim/adamw_8bit.h): exp_avg and
// exp_avg_sq are stored as one byte per element, indices into a 256-entry dynamic map (signed for exp_avg, unsigned
// for exp_avg_sq) scaled by an F32 absmax per block of 256 elements. One pass per parameter: dequantize both moments,
// update them, take each block's new absmax, step the parameter, quantize the moments again.
// Plain CUDA: no LibTorch header; the caller passes raw pointers and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

constexpr int64_t kAdamW8bitBlock = 256;  // elements per absmax block (bitsandbytes' BLOCKSIZE_2STATE)

// One parameter's tensors, n elements each, contiguous; absmax1/absmax2 hold ceil(n / 256) floats. compensation
// (nullable; bf16/fp16 parameters only) turns on Kahan-compensated updates as in kernels/adamw_kahan.h. map1 and
// map2 are the signed and unsigned dynamic maps, F32 [256] each, on the device.
struct AdamW8bitTensors {
  void* param;
  const void* grad;
  uint8_t* codes1;  // exp_avg
  uint8_t* codes2;  // exp_avg_sq
  float* absmax1;
  float* absmax2;
  void* compensation;
  const float* map1;
  const float* map2;
  int64_t n;
};

// Device scalars (F32 [] each; nothing syncs with the host): step is the step count after this step's increment;
// grad_scale (nullable) divides the gradient; found_inf (nullable) skips the step when non-zero, leaving every
// tensor as it was.
struct AdamW8bitScalars {
  const float* step;
  const float* grad_scale;
  const float* found_inf;
  float beta1, beta2, lr, eps, weight_decay;
};

// bitsandbytes' kOptimizerStatic8bit2StateBlockwise (ADAM), formula for formula: with g the gradient (a non-finite
// element resets its moments to 0 and keeps its parameter), m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2)
// g^2, p' = (p - lr sqrt(1 - beta2^t) / (1 - beta1^t) m / (sqrt(v) + sqrt(1 - beta2^t) eps)) (1 - lr wd) (stored in
// p's dtype before and after the decay, as theirs; with compensation one Kahan-compensated add of p' - p); the
// moments are quantized to the nearest map entry of m / absmax (a binary search with bitsandbytes' tie rule), and
// exp_avg's code keeps m's sign.
void adamw_8bit_step(const AdamW8bitTensors& t, const AdamW8bitScalars& s, DType dtype, void* stream);

}  // namespace ft::kernels

// AdamW for F32 parameters (optim/optimizer.h) in one pass over each parameter, with PyTorch's fused AdamW
// arithmetic (torch.optim.AdamW(fused=True): the same F32/F64 operations in the same order). Two things it does that
// PyTorch's kernel does not: it leaves the gradient as it was (PyTorch's stores the gradient divided by grad_scale
// back, a write of 4 bytes per element that nothing reads), and it can write the new parameter's amax (max |p|), which
// FP8 training's tensorwise cast of the weight then takes instead of reading the weight once more for it.
// Plain CUDA: no LibTorch header; the caller passes raw pointers and a stream.
#pragma once

#include <cstdint>

namespace ft::kernels {

// One parameter's F32 tensors, n elements each, contiguous. amax (nullable): F32 [1] that the step raises to the
// new parameter's max |p| (atomically; the caller zeroes it first). A skipped step leaves it the unchanged
// parameter's max |p|.
struct AdamWF32Tensors {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  float* amax;
  int64_t n;
};

// Device scalars (F32 [] each, read on the device, so nothing syncs with the host): step is the step count after
// this step's increment; grad_scale (nullable) divides the gradient; found_inf (nullable) skips the step when
// non-zero, leaving every tensor as it was. The hyper-parameters are F64, as PyTorch's kernel takes them.
struct AdamWF32Scalars {
  const float* step;
  const float* grad_scale;
  const float* found_inf;
  double lr, beta1, beta2, eps, weight_decay;
};

// p = p - lr wd p; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
// p = p - (lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
void adamw_f32_step(const AdamWF32Tensors& t, const AdamWF32Scalars& s, void* stream);

}  // namespace ft::kernels

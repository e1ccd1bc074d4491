// LoRA's down projection under adapter dropout, dropout(h) A^T, on CUDA with a mask drawn from the device generator
// by (seed, offset) (kernels/dropout.h): backward draws the mask again, so neither the mask nor the dropped input
// is kept for it, only h (which the adapted projections of one input share). ATen's dropout keeps a bool mask and
// the dropped copy per adapted projection: 3 bytes per input element, ~18 GiB for a 7B model's seven adapted
// projections at 8,192 tokens. Elsewhere the adapters keep at::dropout.
#pragma once

#include <ATen/ATen.h>

namespace ft::model {

// True when this build has the kernel and it can take h: CUDA, one of F32/BF16/F16.
bool fused_lora_dropout_available(const at::Tensor& h);

// dropout(h, p) a^T for h [N, in] and a [r, in] of h's dtype: [N, r]. Each call draws a new mask (inverted dropout,
// as torch.nn.Dropout; p rounded to a multiple of 2^-16) from the default generator of h's device and advances it,
// so that setting its state replays the mask (activation checkpointing, resume). Gradients for h and a; the
// backward draws the mask once for both. Precondition: fused_lora_dropout_available(h).
at::Tensor fused_lora_dropout_down(const at::Tensor& h, const at::Tensor& a, double p);

}  // namespace ft::model

// The optimizer's side of kernels/adamw_kahan.h: one parameter's Kahan-compensated AdamW step in one CUDA kernel.
// Built with the kernels (kahan_kernel.cpp); no_kernels.cpp stands in elsewhere and takes nothing.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace ft::optim {

// One parameter's AdamW state (AdamW keeps one per parameter; the kernel reads and updates it in place).
struct AdamWState {
  at::Tensor exp_avg;       // param dtype/shape
  at::Tensor exp_avg_sq;    // param dtype/shape (F32 when compensated)
  at::Tensor step;          // F32 [] on the param's device
  at::Tensor compensation;  // param dtype/shape when compensated, else undefined
};

struct KahanHyper {
  double lr, beta1, beta2, eps, weight_decay;
};

// Whether the kernel takes `param`: on CUDA, bf16 or fp16, contiguous, with a dense gradient and state of the same
// device, dtypes and layout.
bool kahan_kernel_takes(const at::Tensor& param, const AdamWState& s);

// The step (s.step already counts it); grad_scale and found_inf are F32 [] on param's device.
void kahan_kernel_step(const at::Tensor& param, AdamWState& s, const KahanHyper& h,
                       const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf);

}  // namespace ft::optim

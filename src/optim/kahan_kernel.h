// The optimizer's side of kernels/adamw_kahan.h: one parameter's Kahan-compensated AdamW step in one CUDA kernel.
// Built with the kernels (kahan_kernel.cpp); no_kernels.cpp stands in elsewhere and takes nothing.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace ft::optim {

// A parameter's Kahan step state: exp_avg and compensation of the parameter's dtype, exp_avg_sq F32, step F32 [].
struct KahanState {
  at::Tensor exp_avg, exp_avg_sq, compensation, step;
};

struct KahanHyper {
  double lr, beta1, beta2, eps, weight_decay;
};

// Whether the kernel takes `param`: on CUDA, bf16 or fp16, contiguous, with a dense gradient and state of the same
// device, dtypes and layout.
bool kahan_kernel_takes(const at::Tensor& param, const KahanState& s);

// The step (s.step already counts it); grad_scale and found_inf are F32 [] on param's device.
void kahan_kernel_step(const at::Tensor& param, KahanState& s, const KahanHyper& h,
                       const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf);

}  // namespace ft::optim

// The optimizer's side of the CUDA step kernels: one parameter's F32 AdamW step (kernels/adamw_f32.h),
// Kahan-compensated AdamW step (kernels/adamw_kahan.h) or 8-bit-moment AdamW step (kernels/adamw_8bit.h) in one kernel
// each. Each advances the parameter's version counter, as an in-place ATen op does. Built with the kernels
// (step_kernels.cpp); no_kernels.cpp stands in elsewhere and takes nothing.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace ft::optim {

// One parameter's AdamW state (AdamW keeps one per parameter; the kernels read and update it in place).
struct AdamWState {
  at::Tensor exp_avg;       // param dtype/shape; U8 codes of the param's shape with 8-bit moments
  at::Tensor exp_avg_sq;    // param dtype/shape (F32 when compensated); U8 codes with 8-bit moments
  at::Tensor step;          // F32 [] on the param's device
  at::Tensor compensation;  // param dtype/shape when compensated, else undefined
  // With 8-bit moments (optim/adamw_8bit.h): F32 [ceil(numel / 256)] each, the blocks' scales; else undefined.
  at::Tensor exp_avg_absmax;
  at::Tensor exp_avg_sq_absmax;

  bool eight_bit() const { return exp_avg_absmax.defined(); }
};

struct StepHyper {
  double lr, beta1, beta2, eps, weight_decay;
};

// Whether the F32 kernel takes `param`: on CUDA, F32, contiguous, with a dense F32 gradient and F32 moments of its
// layout, and at least kF32KernelMinNumel elements (smaller ones step together in PyTorch's multi-tensor kernel,
// one launch for all of them, where this kernel launches once per parameter).
constexpr int64_t kF32KernelMinNumel = int64_t{1} << 20;
bool f32_kernel_takes(const at::Tensor& param, const AdamWState& s);

// The step (s.step already counts it); grad_scale and found_inf are F32 [] on param's device. `amax` (F32 [] on
// param's device, zeroed by the caller, or undefined) is raised to the new parameter's max |p|.
void f32_kernel_step(const at::Tensor& param, AdamWState& s, const StepHyper& h,
                     const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf,
                     const at::Tensor& amax);

// Whether the Kahan kernel takes `param`: on CUDA, bf16 or fp16, contiguous, with a dense gradient and state of the
// same device, dtypes and layout.
bool kahan_kernel_takes(const at::Tensor& param, const AdamWState& s);

// The step (s.step already counts it); grad_scale and found_inf are F32 [] on param's device.
void kahan_kernel_step(const at::Tensor& param, AdamWState& s, const StepHyper& h,
                       const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf);

// Whether the 8-bit kernel takes `param`: on CUDA, F32/bf16/fp16, contiguous, with a dense gradient of its dtype,
// 8-bit state on its device and `maps` (F32 [2, 256]) there too.
bool eight_bit_kernel_takes(const at::Tensor& param, const AdamWState& s, const at::Tensor& maps);

// The step (s.step already counts it); `maps` holds the signed and the unsigned dynamic map; grad_scale and
// found_inf are F32 [] on param's device.
void eight_bit_kernel_step(const at::Tensor& param, AdamWState& s, const at::Tensor& maps, const StepHyper& h,
                           const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf);

}  // namespace ft::optim

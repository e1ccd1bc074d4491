#include "optim/step_kernels.h"

#include <c10/cuda/CUDAStream.h>

#include "kernels/adamw_8bit.h"
#include "kernels/adamw_f32.h"
#include "kernels/adamw_kahan.h"
#include "optim/adamw_8bit.h"
#include "util/error.h"

namespace ft::optim {
namespace {

static_assert(kernels::kAdamW8bitBlock == kEightBitBlock, "one block size for the kernel and the composite");

bool same_layout(const at::Tensor& t, const at::Tensor& param, at::ScalarType dtype) {
  return t.defined() && t.device() == param.device() && t.scalar_type() == dtype && t.is_contiguous() &&
         t.sizes() == param.sizes();
}

bool on_device_f32(const at::Tensor& t, const at::Tensor& param, int64_t numel) {
  return t.defined() && t.device() == param.device() && t.scalar_type() == at::kFloat && t.is_contiguous() &&
         t.numel() == numel;
}

kernels::DType kernel_dtype(at::ScalarType t) {
  if (t == at::kHalf) return kernels::DType::kF16;
  return t == at::kBFloat16 ? kernels::DType::kBF16 : kernels::DType::kF32;
}

void* stream_of(const at::Tensor& param) {
  return c10::cuda::getCurrentCUDAStream(param.device().index()).stream();
}

// The kernels write the parameter through its pointer: its version counter moves as an in-place op's would, so that
// whatever saved the old values (autograd, quant::KnownAmax) sees the change.
void written(const at::Tensor& param) {
  param.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

bool f32_kernel_takes(const at::Tensor& param, const AdamWState& s) {
  if (!param.is_cuda() || param.scalar_type() != at::kFloat || !param.is_contiguous()) return false;
  if (param.numel() < kF32KernelMinNumel || s.compensation.defined() || s.eight_bit()) return false;
  const at::Tensor& grad = param.grad();
  return grad.defined() && !grad.is_sparse() && same_layout(grad, param, at::kFloat) &&
         same_layout(s.exp_avg, param, at::kFloat) && same_layout(s.exp_avg_sq, param, at::kFloat) &&
         on_device_f32(s.step, param, 1);
}

void f32_kernel_step(const at::Tensor& param, AdamWState& s, const StepHyper& h,
                     const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf,
                     const at::Tensor& amax) {
  FT_CHECK(!amax.defined() || on_device_f32(amax, param, 1), "f32_kernel_step: amax must be one F32 on the device");
  const kernels::AdamWF32Tensors t{param.data_ptr<float>(),
                                   param.grad().const_data_ptr<float>(),
                                   s.exp_avg.data_ptr<float>(),
                                   s.exp_avg_sq.data_ptr<float>(),
                                   amax.defined() ? amax.data_ptr<float>() : nullptr,
                                   param.numel()};
  const kernels::AdamWF32Scalars k{s.step.const_data_ptr<float>(),
                                   grad_scale ? grad_scale->const_data_ptr<float>() : nullptr,
                                   found_inf ? found_inf->const_data_ptr<float>() : nullptr,
                                   h.lr,
                                   h.beta1,
                                   h.beta2,
                                   h.eps,
                                   h.weight_decay};
  kernels::adamw_f32_step(t, k, stream_of(param));
  written(param);
}

bool kahan_kernel_takes(const at::Tensor& param, const AdamWState& s) {
  const auto dtype = param.scalar_type();
  if (!param.is_cuda() || (dtype != at::kBFloat16 && dtype != at::kHalf) || !param.is_contiguous()) return false;
  const at::Tensor& grad = param.grad();
  return grad.defined() && !grad.is_sparse() && same_layout(grad, param, dtype) &&
         same_layout(s.exp_avg, param, dtype) && same_layout(s.compensation, param, dtype) &&
         same_layout(s.exp_avg_sq, param, at::kFloat) && s.step.device() == param.device() &&
         s.step.scalar_type() == at::kFloat;
}

void kahan_kernel_step(const at::Tensor& param, AdamWState& s, const StepHyper& h,
                       const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const kernels::KahanAdamWTensors t{param.data_ptr(),          param.grad().const_data_ptr(),
                                     s.exp_avg.data_ptr(),      s.exp_avg_sq.data_ptr<float>(),
                                     s.compensation.data_ptr(), param.numel()};
  const kernels::KahanAdamWScalars k{s.step.const_data_ptr<float>(),
                                     grad_scale ? grad_scale->const_data_ptr<float>() : nullptr,
                                     found_inf ? found_inf->const_data_ptr<float>() : nullptr,
                                     h.beta1,
                                     h.beta2,
                                     static_cast<float>(h.lr),
                                     static_cast<float>(h.eps),
                                     static_cast<float>(h.weight_decay)};
  kernels::adamw_kahan_step(t, k, kernel_dtype(param.scalar_type()), stream_of(param));
  written(param);
}

bool eight_bit_kernel_takes(const at::Tensor& param, const AdamWState& s, const at::Tensor& maps) {
  const auto dtype = param.scalar_type();
  if (!param.is_cuda() || !param.is_contiguous() || !s.eight_bit()) return false;
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) return false;
  const at::Tensor& grad = param.grad();
  const int64_t blocks = (param.numel() + kEightBitBlock - 1) / kEightBitBlock;
  return grad.defined() && !grad.is_sparse() && same_layout(grad, param, dtype) &&
         same_layout(s.exp_avg, param, at::kByte) && same_layout(s.exp_avg_sq, param, at::kByte) &&
         on_device_f32(s.exp_avg_absmax, param, blocks) && on_device_f32(s.exp_avg_sq_absmax, param, blocks) &&
         (!s.compensation.defined() || same_layout(s.compensation, param, dtype)) &&
         on_device_f32(maps, param, 2 * 256) && on_device_f32(s.step, param, 1);
}

void eight_bit_kernel_step(const at::Tensor& param, AdamWState& s, const at::Tensor& maps, const StepHyper& h,
                           const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const float* map = maps.const_data_ptr<float>();
  const kernels::AdamW8bitTensors t{param.data_ptr(),
                                    param.grad().const_data_ptr(),
                                    s.exp_avg.data_ptr<uint8_t>(),
                                    s.exp_avg_sq.data_ptr<uint8_t>(),
                                    s.exp_avg_absmax.data_ptr<float>(),
                                    s.exp_avg_sq_absmax.data_ptr<float>(),
                                    s.compensation.defined() ? s.compensation.data_ptr() : nullptr,
                                    map,
                                    map + 256,
                                    param.numel()};
  const kernels::AdamW8bitScalars k{s.step.const_data_ptr<float>(),
                                    grad_scale ? grad_scale->const_data_ptr<float>() : nullptr,
                                    found_inf ? found_inf->const_data_ptr<float>() : nullptr,
                                    static_cast<float>(h.beta1),
                                    static_cast<float>(h.beta2),
                                    static_cast<float>(h.lr),
                                    static_cast<float>(h.eps),
                                    static_cast<float>(h.weight_decay)};
  kernels::adamw_8bit_step(t, k, kernel_dtype(param.scalar_type()), stream_of(param));
  written(param);
}

}  // namespace ft::optim

#include "optim/kahan_kernel.h"

#include <c10/cuda/CUDAStream.h>

#include "kernels/adamw_kahan.h"

namespace ft::optim {
namespace {

bool same_layout(const at::Tensor& t, const at::Tensor& param, at::ScalarType dtype) {
  return t.defined() && t.device() == param.device() && t.scalar_type() == dtype && t.is_contiguous() &&
         t.sizes() == param.sizes();
}

}  // namespace

bool kahan_kernel_takes(const at::Tensor& param, const AdamWState& s) {
  const auto dtype = param.scalar_type();
  if (!param.is_cuda() || (dtype != at::kBFloat16 && dtype != at::kHalf) || !param.is_contiguous()) return false;
  const at::Tensor& grad = param.grad();
  return grad.defined() && !grad.is_sparse() && same_layout(grad, param, dtype) &&
         same_layout(s.exp_avg, param, dtype) && same_layout(s.compensation, param, dtype) &&
         same_layout(s.exp_avg_sq, param, at::kFloat) && s.step.device() == param.device() &&
         s.step.scalar_type() == at::kFloat;
}

void kahan_kernel_step(const at::Tensor& param, AdamWState& s, const KahanHyper& h,
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
  const auto dtype = param.scalar_type() == at::kHalf ? kernels::DType::kF16 : kernels::DType::kBF16;
  kernels::adamw_kahan_step(t, k, dtype, c10::cuda::getCurrentCUDAStream(param.device().index()).stream());
}

}  // namespace ft::optim

#include "model/norm.h"

#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>

#include "kernels/add_rms_norm.h"
#include "model/kernel_dtype.h"
#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kMaxHidden = 16384;  // kernels/add_rms_norm.cu's limit

const void* ptr_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

// The kernel's types. Without a delta the caller passes the output's type for it (a combination the kernel has
// whenever the output goes with the residual and weight), as the delta is never read.
kernels::NormTypes norm_types(at::ScalarType residual, at::ScalarType delta, at::ScalarType weight,
                              at::ScalarType out) {
  return {kernel_dtype(residual), kernel_dtype(delta), kernel_dtype(weight), kernel_dtype(out)};
}

// Autograd inputs: residual [..., H], delta [..., H] (absent for the plain norm), weight [H]. Outputs: {sum, normed}
// with a delta, else {normed}; the sum of the plain norm would be the residual itself.
class AddRmsNorm : public torch::autograd::Function<AddRmsNorm> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& residual, const std::optional<at::Tensor>& delta,
                               const at::Tensor& weight, double eps, int64_t out_dtype, double weight_offset) {
    const c10::cuda::CUDAGuard device_guard(residual.device());
    const auto out = static_cast<at::ScalarType>(out_dtype);
    const int64_t hidden = residual.size(-1), rows = hidden == 0 ? 0 : residual.numel() / hidden;
    const at::Tensor r = residual.contiguous();                                                // [..., H]
    const at::Tensor d = delta ? delta->contiguous() : at::Tensor();                           // [..., H] or undefined
    const at::Tensor w = weight.contiguous();                                                  // [H]
    const at::Tensor sum = d.defined() ? at::empty_like(r, at::MemoryFormat::Contiguous) : r;  // [..., H]
    at::Tensor normed = at::empty(r.sizes(), r.options().dtype(out));                          // [..., H] out dtype
    at::Tensor rstd = at::empty({rows}, r.options().dtype(at::kFloat));                        // F32 [N]
    const kernels::AddRmsNormForward args{r.data_ptr(),
                                          ptr_or_null(d),
                                          w.data_ptr(),
                                          sum.data_ptr(),
                                          normed.data_ptr(),
                                          rstd.data_ptr<float>(),
                                          rows,
                                          hidden,
                                          static_cast<float>(eps),
                                          static_cast<float>(weight_offset)};
    const at::ScalarType delta_dtype = d.defined() ? d.scalar_type() : out;
    kernels::add_rms_norm_forward(args, norm_types(r.scalar_type(), delta_dtype, w.scalar_type(), out), stream_of(r));
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({sum, rstd, weight});
    ctx->saved_data["delta_dtype"] = d.defined() ? static_cast<int64_t>(d.scalar_type()) : int64_t{-1};
    ctx->saved_data["out_dtype"] = out_dtype;
    ctx->saved_data["weight_offset"] = weight_offset;
    if (!d.defined()) return {normed};
    return {sum, normed};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& sum = saved[0];     // [..., H] residual dtype
    const at::Tensor& rstd = saved[1];    // F32 [N]
    const at::Tensor& weight = saved[2];  // [H]
    const c10::cuda::CUDAGuard device_guard(sum.device());
    const int64_t delta_code = ctx->saved_data["delta_dtype"].toInt();
    const bool has_delta = delta_code >= 0;
    const auto out = static_cast<at::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    const auto residual_dtype = sum.scalar_type();
    const at::ScalarType delta_dtype = has_delta ? static_cast<at::ScalarType>(delta_code) : out;
    // The gradients of the outputs, in their dtypes: grad_sum [..., H] (undefined when the residual stream ends
    // here, e.g. at the final norm) and grad_normed [..., H].
    const at::Tensor grad_sum =
        has_delta && grads[0].defined() ? grads[0].to(residual_dtype).contiguous() : at::Tensor();
    at::Tensor grad_normed = grads[has_delta ? 1 : 0];
    grad_normed =
        grad_normed.defined() ? grad_normed.to(out).contiguous() : at::zeros(sum.sizes(), sum.options().dtype(out));
    const size_t weight_edge = has_delta ? 2 : 1;
    const bool need_weight = ctx->needs_input_grad(weight_edge);

    const int64_t hidden = sum.size(-1), rows = hidden == 0 ? 0 : sum.numel() / hidden;
    at::Tensor grad_residual = at::empty_like(sum, at::MemoryFormat::Contiguous);  // [..., H] residual dtype
    // The delta's gradient: the same tensor when the dtypes agree (as autograd's add does), else its own rounding.
    at::Tensor grad_delta;
    if (has_delta) {
      grad_delta =
          delta_dtype == residual_dtype ? grad_residual : at::empty(sum.sizes(), sum.options().dtype(delta_dtype));
    }
    at::Tensor partial, grad_weight;  // F32 [blocks, H] workspace; [H] weight dtype
    const kernels::NormTypes types = norm_types(residual_dtype, delta_dtype, weight.scalar_type(), out);
    if (need_weight) {
      partial = at::empty({kernels::add_rms_norm_backward_blocks(rows, hidden, types), hidden},
                          sum.options().dtype(at::kFloat));
      grad_weight = rows == 0 ? at::zeros_like(weight) : at::empty_like(weight);
    }
    const at::Tensor w = weight.contiguous();
    const kernels::AddRmsNormBackward args{
        ptr_or_null(grad_sum),
        grad_normed.data_ptr(),
        sum.data_ptr(),
        w.data_ptr(),
        rstd.data_ptr<float>(),
        grad_residual.data_ptr(),
        grad_delta.defined() && !grad_delta.is_same(grad_residual) ? grad_delta.data_ptr() : nullptr,
        partial.defined() ? partial.data_ptr<float>() : nullptr,
        grad_weight.defined() ? grad_weight.data_ptr() : nullptr,
        rows,
        hidden,
        static_cast<float>(ctx->saved_data["weight_offset"].toDouble())};
    kernels::add_rms_norm_backward(args, types, stream_of(sum));
    return {grad_residual, grad_delta, grad_weight, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool add_rms_norm_available(const at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight,
                            at::ScalarType out_dtype) {
  if (!residual.is_cuda() || !weight.is_cuda() || weight.device() != residual.device() || residual.dim() < 1 ||
      weight.dim() != 1 || weight.size(0) != residual.size(-1) || residual.size(-1) > kMaxHidden) {
    return false;
  }
  if (delta.defined() && (delta.device() != residual.device() || delta.sizes() != residual.sizes())) return false;
  const at::ScalarType delta_dtype = delta.defined() ? delta.scalar_type() : out_dtype;
  for (const auto t : {residual.scalar_type(), delta_dtype, weight.scalar_type(), out_dtype}) {
    if (!kernel_supports(t)) return false;
  }
  return kernels::add_rms_norm_supported(
      norm_types(residual.scalar_type(), delta_dtype, weight.scalar_type(), out_dtype));
}

std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& residual, const at::Tensor& delta,
                                               const at::Tensor& weight, double eps, at::ScalarType out_dtype,
                                               double weight_offset) {
  FT_CHECK(delta.defined() && add_rms_norm_available(residual, delta, weight, out_dtype),
           "add_rms_norm: residual, delta and weight must be CUDA tensors of matching shapes and supported dtypes");
  const auto out = AddRmsNorm::apply(residual, std::optional<at::Tensor>(delta), weight, eps,
                                     static_cast<int64_t>(out_dtype), weight_offset);
  return {out[0], out[1]};
}

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, at::ScalarType out_dtype,
                          double weight_offset) {
  FT_CHECK(add_rms_norm_available(x, at::Tensor(), weight, out_dtype),
           "fused_rms_norm: x and weight must be CUDA tensors of matching shapes and supported dtypes");
  return AddRmsNorm::apply(x, std::optional<at::Tensor>(), weight, eps, static_cast<int64_t>(out_dtype),
                           weight_offset)[0];
}

}  // namespace ft::model

#include "model/moe_rows.h"

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/moe_rows.h"
#include "model/kernel_dtype.h"
#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [N, hidden] = per token the sum of its k rows of `rows` [S, hidden] (weighted when `weights` is defined).
at::Tensor combine(const at::Tensor& rows, const at::Tensor& weights, const at::Tensor& inverse, int64_t k) {
  const int64_t n = inverse.size(0) / k, hidden = rows.size(1);
  at::Tensor out = at::empty({n, hidden}, rows.options());
  const kernels::DType w_dtype =
      weights.defined() ? kernel_dtype(weights.scalar_type()) : kernel_dtype(rows.scalar_type());
  kernels::moe_combine_rows(rows.data_ptr(), weights.defined() ? weights.data_ptr() : nullptr, w_dtype,
                            inverse.data_ptr<int64_t>(), n, k, hidden, out.data_ptr(), kernel_dtype(rows.scalar_type()),
                            stream_of(rows));
  return out;
}

class DispatchRows : public torch::autograd::Function<DispatchRows> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& order,
                            const at::Tensor& inverse, int64_t k) {
    ctx->save_for_backward({inverse});
    ctx->saved_data["k"] = k;
    return x.index_select(0, at::floor_divide(order, k));  // [S, hidden]
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const at::Tensor inverse = ctx->get_saved_variables()[0];
    const at::Tensor grad = grad_out[0].contiguous();  // [S, hidden]
    return {combine(grad, at::Tensor(), inverse, ctx->saved_data["k"].toInt()), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

class CombineRows : public torch::autograd::Function<CombineRows> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, const at::Tensor& weights,
                            const at::Tensor& order, const at::Tensor& inverse, int64_t k) {
    const at::Tensor rows = y.contiguous(), w = weights.contiguous();
    ctx->save_for_backward({rows, w, order});
    ctx->saved_data["k"] = k;
    return combine(rows, w, inverse, k);  // [N, hidden]
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &w = saved[1], &order = saved[2];
    const at::Tensor grad = grad_out[0].to(rows.scalar_type()).contiguous();  // [N, hidden]
    at::Tensor grad_rows = at::empty_like(rows);                              // [S, hidden]
    at::Tensor grad_w = at::zeros({rows.size(0)}, rows.options().dtype(at::kFloat));  // stays 0 for 0 columns
    kernels::moe_combine_rows_backward(grad.data_ptr(), rows.data_ptr(), w.data_ptr(), kernel_dtype(w.scalar_type()),
                                       order.data_ptr<int64_t>(), rows.size(0), ctx->saved_data["k"].toInt(),
                                       rows.size(1), grad_rows.data_ptr(), grad_w.data_ptr<float>(),
                                       kernel_dtype(rows.scalar_type()), stream_of(rows));
    return {grad_rows, grad_w.to(w.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool moe_rows_available(const at::Tensor& y, const at::Tensor& weights) {
  if (!y.is_cuda() || y.dim() != 2 || !kernel_supports(y.scalar_type())) return false;
  if (!weights.defined()) return true;
  return weights.device() == y.device() &&
         (weights.scalar_type() == y.scalar_type() || weights.scalar_type() == at::kFloat);
}

at::Tensor moe_dispatch_rows(const at::Tensor& x, const ops::ExpertSlots& slots, int64_t k) {
  FT_CHECK(moe_rows_available(x, at::Tensor()), "moe_dispatch_rows: x must be a CUDA matrix of F32, BF16 or F16");
  FT_CHECK(k > 0 && slots.order.size(0) == x.size(0) * k, "moe_dispatch_rows: the slots are not N x k");
  return DispatchRows::apply(x, slots.order, slots.inverse, k);
}

at::Tensor moe_combine_rows(const at::Tensor& y, const at::Tensor& weights_sorted, const ops::ExpertSlots& slots,
                            int64_t k) {
  FT_CHECK(k > 0 && moe_rows_available(y, weights_sorted) && weights_sorted.defined() &&
               weights_sorted.numel() == y.size(0) && slots.inverse.size(0) == y.size(0),
           "moe_combine_rows: y [S, hidden] and weights [S] must be CUDA tensors, the weights in y's dtype or F32");
  return CombineRows::apply(y, weights_sorted.reshape({-1}), slots.order, slots.inverse, k);
}

}  // namespace ft::model

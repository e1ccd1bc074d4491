#include "model/rope.h"

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/rope.h"
#include "model/kernel_dtype.h"
#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x [B, T, H, D]: read in place when only its rows are strided (a slice of a fused q/k/v output), else copied.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, float sign) {
  const int64_t d = x.size(3), heads = x.size(2);
  const bool rows_strided = x.stride(3) == 1 && x.stride(2) == d && x.stride(0) == x.size(1) * x.stride(1);
  const at::Tensor xc = rows_strided ? x : x.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  kernels::rope(xc.data_ptr(), xc.stride(1), cos.data_ptr(), sin.data_ptr(), y.data_ptr(), x.size(0) * x.size(1),
                heads, d, sign, kernel_dtype(x.scalar_type()),
                stream_of(x));
  return y;
}

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const at::Tensor c = cos.contiguous(), s = sin.contiguous();
    ctx->save_for_backward({c, s});
    return rotate(x, c, s, 1.0f);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    // The rotation is orthogonal: its transpose is the rotation by -sin.
    return {rotate(grad_out[0], saved[0], saved[1], -1.0f), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_rope_available(const at::Tensor& x, const at::Tensor& cos) {
  const auto t = x.scalar_type();
  return x.is_cuda() && cos.scalar_type() == t && kernel_supports(t) &&
         x.size(-1) % 2 == 0;
}

at::Tensor fused_rope_apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  FT_CHECK(x.dim() == 4 && cos.dim() == 3 && x.size(0) == cos.size(0) && x.size(1) == cos.size(1) &&
               x.size(3) == cos.size(2),
           "fused rope: x [B, T, H, D] and cos/sin [B, T, D] expected");
  return RopeFunction::apply(x, cos.expand({x.size(0), x.size(1), x.size(3)}),
                             sin.expand({x.size(0), x.size(1), x.size(3)}));
}

}  // namespace ft::model

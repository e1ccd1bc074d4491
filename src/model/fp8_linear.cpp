#include "model/fp8_linear.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y [N, out] = x [N, in] W^T over W's codes [out, in] and row scales [out]; `fast`: our kernels and _scaled_mm,
// else the ATen quantization and the F32 reference GEMM.
class Fp8Gemm : public torch::autograd::Function<Fp8Gemm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scale,
                            at::ScalarType dtype, bool fast) {
    ctx->save_for_backward({codes, scale});
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["fast"] = fast;
    return fp8_rows_forward(x, {codes, scale}, dtype, fast);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& codes = saved[0];  // F8E4M3FN [out, in]
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const bool fast = ctx->saved_data["fast"].toBool();
    const at::Tensor codes_t = fast ? fp8_transpose_cuda(codes) : codes.t();  // [in, out]
    const at::Tensor dx = fp8_rows_input_grad(grads[0], codes_t, saved[1], dtype, fast);
    return {dx.to(x_dtype), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor fp8_rows_forward(const at::Tensor& x, const quant::Fp8Tensor& w, at::ScalarType dtype, bool fast) {
  const at::Tensor xin = x.to(dtype).contiguous();  // [N, in]
  if (!fast) return quant::fp8_gemm_reference(quant::quantize_fp8_rows(xin), w, dtype);
  const quant::Fp8Tensor xq = fp8_quantize_rows_cuda(xin, at::Tensor());
  // Fast accumulation in the forward GEMM only, as torchao's float8 training does: the input gradient keeps
  // CUTLASS's periodic F32 promotion.
  return at::_scaled_mm(xq.data, w.data.t(), xq.scale.unsqueeze(1), w.scale.unsqueeze(0), std::nullopt, std::nullopt,
                        dtype, /*use_fast_accum=*/true);  // [N, out]
}

at::Tensor fp8_rows_input_grad(const at::Tensor& dy_in, const at::Tensor& codes_t, const at::Tensor& scale,
                               at::ScalarType dtype, bool fast) {
  const at::Tensor dy = dy_in.to(dtype).contiguous();                    // [N, out]
  const at::Tensor ones = at::ones({codes_t.size(0)}, scale.options());  // W's codes need no scale of their own now
  if (!fast) {
    const quant::Fp8Tensor dyq = quant::quantize_fp8_rows(dy.to(at::kFloat) * scale.unsqueeze(0));
    return quant::fp8_gemm_reference(dyq, {codes_t, ones}, dtype);  // [N, in]
  }
  const quant::Fp8Tensor dyq = fp8_quantize_rows_cuda(dy, scale);
  return at::_scaled_mm(dyq.data, codes_t.t(), dyq.scale.unsqueeze(1), ones.unsqueeze(0), std::nullopt, std::nullopt,
                        dtype);  // [N, in]
}

at::Tensor fp8_linear(const at::Tensor& x, const quant::Fp8Tensor& w, at::ScalarType weight_dtype,
                      const KernelPolicy& policy) {
  if (w.data.device() != x.device()) {
    throw Error("FP8 weight on " + w.data.device().str() + ", its input on " + x.device().str(),
                "FP8 codes are no module state and do not move with Module::to: quantize on the device the model "
                "runs on (model.quantize quantizes on run.device while loading)");
  }
  const auto device_type = x.device().type();
  const at::ScalarType dtype =
      at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type) : weight_dtype;
  const bool fast = policy.kernels_for(x) && fp8_gemm_available(x.device(), dtype, w);
  const at::Tensor x2d = x.reshape({-1, x.size(-1)});                // [N, in]
  at::Tensor y = Fp8Gemm::apply(x2d, w.data, w.scale, dtype, fast);  // [N, out]
  if (x.dim() == 2) return y;  // not a view: callers add into it in place (a view would make that a CopySlices)
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = y.size(1);
  return y.view(shape);
}

}  // namespace ft::model

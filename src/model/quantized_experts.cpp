#include "model/quantized_experts.h"

#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "model/moe_experts.h"
#include "model/nf4_linear.h"
#include "model/recompute.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs to dequantize the weight again, carried through saved_data as a capsule (an IValue holds no
// plain C++ struct). The codes are frozen tensors, no activations, so no saved-tensor hook needs to see them.
struct GemmState : torch::CustomClassHolder {
  std::shared_ptr<const QuantizedExperts> weight;
  at::ScalarType dtype = at::kFloat;
  KernelPolicy policy;
};

// y [S, N] = x [S, K] W_e^T per expert slice; backward: dx [S, K] = dy W_e, with W dequantized each time.
class QuantizedGroupedGemm : public torch::autograd::Function<QuantizedGroupedGemm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& ends,
                            const c10::intrusive_ptr<GemmState>& state) {
    const at::Tensor w = state->weight->dequantize(state->dtype, state->policy);  // [E, N, K]
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    if (recomputing()) {
      ctx->save_for_backward({ends, w});  // this layer's backward comes next (model/recompute.h)
    } else {
      ctx->save_for_backward({ends});  // w is freed on return
    }
    return ops::grouped_gemm(x.to(state->dtype), w, ends, state->policy);  // [S, N]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto state = c10::static_intrusive_pointer_cast<GemmState>(ctx->saved_data["state"].toCapsule());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& ends = saved[0];
    const at::Tensor w = saved.size() > 1 ? saved[1] : state->weight->dequantize(state->dtype, state->policy);
    // W_e^T transposed back: the grouped GEMM of dy [S, N] with [E, K, N] views gives dy W_e per slice.
    const at::Tensor dx = ops::grouped_gemm(grads[0].to(state->dtype), w.transpose(1, 2), ends, state->policy);
    return {dx.to(x_dtype), at::Tensor(), at::Tensor()};
  }
};

void check_stack(const at::Tensor& w) {
  FT_CHECK(w.defined() && w.dim() == 3 && w.numel() > 0,
           "quantize_experts: an experts' weight is a non-empty stack [E, N, K]");
}

}  // namespace

at::Tensor QuantizedExperts::dequantize(at::ScalarType out_dtype, const KernelPolicy& policy) const {
  if (nf4) return dequantize_weight(*nf4, out_dtype, policy).view(shape);  // [E, N, K]
  FT_CHECK(fp8 != nullptr, "QuantizedExperts: no codes");
  return quant::dequantize_fp8_rows(*fp8, out_dtype).view(shape);  // [E, N, K]
}

at::Device QuantizedExperts::device() const {
  return nf4 ? nf4->packed.device() : fp8->data.device();
}

int64_t QuantizedExperts::numel() const {
  return c10::multiply_integers(shape);
}

int64_t QuantizedExperts::storage_bytes() const {
  return nf4 ? nf4->storage_bytes() : fp8->storage_bytes();
}

QuantizedExperts quantize_experts(const at::Tensor& w, BaseQuantization format, at::ScalarType dtype) {
  check_stack(w);
  QuantizedExperts q;
  q.shape = w.sizes().vec();
  q.dtype = dtype;
  switch (format) {
    case BaseQuantization::kNf4:
      // With double quantization, as bitsandbytes' Linear4bit and the projections (LinearImpl::quantize_nf4).
      q.nf4 =
          std::make_shared<const quant::Nf4Tensor>(quant::quantize_nf4(w, quant::kNf4Blocksize, /*double_quant=*/true));
      break;
    case BaseQuantization::kFp8:
      q.fp8 = std::make_shared<const quant::Fp8Tensor>(quant::quantize_fp8_rows(w.reshape({-1, w.size(2)})));
      break;
    case BaseQuantization::kNone:
      throw Error("quantize_experts: no quantization format given");
  }
  return q;
}

at::Tensor quantized_grouped_gemm(const at::Tensor& x, const std::shared_ptr<const QuantizedExperts>& w,
                                  const at::Tensor& ends, at::ScalarType dtype, const KernelPolicy& policy) {
  FT_CHECK(w != nullptr && x.dim() == 2 && x.size(1) == w->shape.at(2),
           fmt::format("quantized_grouped_gemm: x [{}] does not chain with the experts' weight",
                       fmt::join(x.sizes(), ", ")));
  if (w->device() != x.device()) {
    throw Error("quantized expert weights on " + w->device().str() + ", their input on " + x.device().str(),
                "quantized codes are no module state and do not move with Module::to: quantize on the device the "
                "model runs on (model.quantize quantizes on run.device while loading)");
  }
  auto state = c10::make_intrusive<GemmState>();
  state->weight = w;
  state->dtype = dtype;
  state->policy = policy;
  return QuantizedGroupedGemm::apply(x, ends, state);
}

}  // namespace ft::model

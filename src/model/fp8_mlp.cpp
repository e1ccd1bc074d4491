// The gated MLP of FP8 training as one op (model/fp8_training.h: fp8_training_mlp). Built with the kernels only.
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "model/fp8_training.h"
#include "model/fp8_training_internal.h"
#include "model/swiglu.h"
#include "util/error.h"

namespace ft::model {
namespace {

using fp8_detail::Plan;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// gate and up [N, I] of the gate/up GEMMs' outputs: two tensors, or the column halves of one (a joint weight).
std::pair<at::Tensor, at::Tensor> gate_and_up(const variable_list& gu) {
  if (gu.size() == 2) return {gu[0], gu[1]};
  const int64_t i = gu[0].size(1) / 2;
  return {gu[0].narrow(1, 0, i), gu[0].narrow(1, i, i)};
}

// y [N, hidden] = down(act(x Wg^T) * (x Wu^T)) for x [N, in], with the group GEMMs of fp8_training.cpp and the
// SwiGLU kernels in between, which write the amax of h = act(gate) * up (the down GEMM's input) and of the gate and
// up gradients (the gate/up GEMMs' output gradients) beside them. Inputs: x, then {Wg, Wu, Wd} or {Wgu, Wd}.
class Fp8GatedMlp : public torch::autograd::Function<Fp8GatedMlp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                            const std::vector<at::Tensor>& weight_amax, bool gelu, at::ScalarType dtype) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // it casts for itself
    const Plan plan{Fp8Training::kTensorwise, /*fast=*/true};
    const size_t k = weights.size() - 1;  // the gate/up weights
    variable_list saved;
    const at::ArrayRef<at::Tensor> amax(weight_amax);  // none, or one per weight
    const variable_list gu = fp8_detail::group_forward(x.to(dtype).contiguous(), {}, weights.slice(0, k),
                                                       amax.empty() ? amax : amax.slice(0, k), plan, dtype,
                                                       saved);  // [N, I] x 2, or [N, 2 I]
    const int64_t gate_up_entries = static_cast<int64_t>(saved.size());
    const auto [gate, up] = gate_and_up(gu);
    at::Tensor h = at::empty(gate.sizes(), gate.options());                     // [N, I]
    const at::Tensor h_amax = at::zeros({}, gate.options().dtype(at::kFloat));  // the kernel's atomic max
    swiglu_rows_forward(gate, up, h, gelu, h_amax.data_ptr<float>());
    const at::Tensor y = fp8_detail::group_forward(h, h_amax, weights.slice(k), amax.empty() ? amax : amax.slice(k),
                                                   plan, dtype, saved)[0];
    saved.insert(saved.end(), gu.begin(), gu.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["gate_up_entries"] = gate_up_entries;
    ctx->saved_data["k"] = static_cast<int64_t>(k);
    ctx->saved_data["gelu"] = gelu;
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    return y;  // [N, hidden]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto k = static_cast<size_t>(ctx->saved_data["k"].toInt());
    if (!grads[0].defined()) return variable_list(k + 5);  // x, the weights, weight_amax, gelu, dtype
    const Plan plan{Fp8Training::kTensorwise, /*fast=*/true};
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto first = static_cast<size_t>(ctx->saved_data["gate_up_entries"].toInt());
    const variable_list saved = ctx->get_saved_variables();
    const at::ArrayRef<at::Tensor> all(saved);
    const variable_list gu(saved.end() - static_cast<int64_t>(k), saved.end());
    // down: dh [N, I] and dWd
    const variable_list down =
        fp8_detail::group_backward({grads[0]}, {}, all.slice(first, all.size() - k - first), plan, dtype, dtype);
    const auto [gate, up] = gate_and_up(gu);
    variable_list dgu;  // like gu
    for (const at::Tensor& t : gu) dgu.push_back(at::empty_like(t));
    const auto [d_gate, d_up] = gate_and_up(dgu);
    const at::Tensor amax = at::zeros({static_cast<int64_t>(k)}, gate.options().dtype(at::kFloat));
    float* a = amax.data_ptr<float>();
    swiglu_rows_backward(down[0], gate, up, d_gate, d_up, ctx->saved_data["gelu"].toBool(),
                         {a, k == 2 ? a + 1 : a});  // one amax for the halves of one gradient
    variable_list result = fp8_detail::group_backward(dgu, amax, all.slice(0, first), plan, dtype, x_dtype);
    result.push_back(down[1]);                                  // dWd
    result.insert(result.end(), 3, at::Tensor());               // weight_amax, gelu, dtype
    return result;
  }
};

}  // namespace

bool fp8_mlp_available(const at::Tensor& x, const std::vector<at::Tensor>& gate_up, const at::Tensor& down,
                       const KernelPolicy& policy) {
  if (!x.is_cuda() || (gate_up.size() != 1 && gate_up.size() != 2)) return false;
  const at::ScalarType dtype = fp8_detail::gemm_dtype(x, down);
  const at::Tensor x2d = x.reshape({-1, x.size(-1)});
  std::vector<at::Tensor> weights = gate_up;
  weights.push_back(down);
  return std::all_of(weights.begin(), weights.end(),
                     [&](const at::Tensor& w) { return fp8_detail::fast_path(x2d, w, dtype, policy); });
}

at::Tensor fp8_training_mlp(const at::Tensor& x, const std::vector<at::Tensor>& gate_up, const at::Tensor& down,
                            bool gelu_tanh, const KernelPolicy& policy, const std::vector<at::Tensor>& weight_amax) {
  FT_CHECK(fp8_mlp_available(x, gate_up, down, policy), "fp8_training_mlp: the FP8 fast path cannot take this MLP");
  std::vector<at::Tensor> weights = gate_up;
  weights.push_back(down);
  const at::Tensor x2d = x.reshape({-1, x.size(-1)});  // [N, in]
  FT_CHECK(weight_amax.empty() || weight_amax.size() == weights.size(),
           "fp8_training_mlp: one known amax per weight, or none");
  const at::Tensor y =
      Fp8GatedMlp::apply(x2d, at::TensorList(weights), weight_amax, gelu_tanh, fp8_detail::gemm_dtype(x, down));
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = y.size(1);
  return y.view(shape);  // [..., hidden]
}

}  // namespace ft::model

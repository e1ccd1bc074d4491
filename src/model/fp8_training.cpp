#include "model/fp8_training.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "model/fp8_linear.h"
#include "model/fp8_training_internal.h"
#include "model/transformer.h"
#include "quant/fp8_cast.h"
#include "util/error.h"

namespace ft::model {
namespace fp8_detail {
namespace {

using quant::Fp8Format;
using quant::Fp8Scaled;

// x [rows, cols] for a GEMM that reduces over cols, scaled per row (rowwise only).
Fp8Scaled cast_rows(const at::Tensor& x, Fp8Format format, const Plan& plan) {
  if (plan.fast) return fp8_cast_rows_cuda(x, format);
  return quant::cast_fp8_rowwise(x, format, /*pow2=*/true);
}

// x [rows, cols] for a GEMM that reduces over rows (rowwise only): x^T's codes [cols, rows], scaled per column of x.
Fp8Scaled cast_columns(const at::Tensor& x, Fp8Format format, const Plan& plan) {
  if (plan.fast) return fp8_cast_columns_cuda(x, format);
  return quant::cast_fp8_rowwise(x.t().contiguous(), format, /*pow2=*/true);
}

// x [rows, cols] cast tensorwise for a GEMM that reads it as it is and one that reads it transposed (the fast
// path's codes_t has its rows padded to 16 with zero codes, as the GEMMs that reduce over them need). `amax`: x's,
// when known (fast path only).
Fp8TwoLayouts cast_both(const at::Tensor& x, Fp8Format format, const Plan& plan, const at::Tensor& amax) {
  if (plan.fast) return fp8_cast_tensorwise_both_cuda(x, format, amax);
  Fp8Scaled q = quant::cast_fp8_tensorwise(x, format);
  at::Tensor codes_t = q.codes.t().contiguous();
  return {std::move(q), std::move(codes_t)};
}

// x [rows, cols] cast for the forward GEMM. Under tensorwise scaling the backward reads x transposed: its codes_t
// and scale go to `saved` (under rowwise it casts x again, along the other dimension, from x that the caller saves).
Fp8Scaled cast_for_forward(const at::Tensor& x, const at::Tensor& amax, const Plan& plan,
                           std::vector<at::Tensor>& saved) {
  if (plan.rowwise()) return cast_rows(x, Fp8Format::kE4m3, plan);
  Fp8TwoLayouts q = cast_both(x, Fp8Format::kE4m3, plan, amax);
  saved.insert(saved.end(), {q.codes_t, q.scaled.inverse});
  return q.scaled;
}

// The weight [out, in] as the casts read it. F32 master weights are cast as they are, as torchao casts the parameter
// itself rather than an autocast copy (one rounding, and a pass fewer); other dtypes in the GEMM dtype.
bool casts_as_it_is(const at::Tensor& weight) {
  return weight.scalar_type() == at::kFloat;
}
at::Tensor weight_for_cast(const at::Tensor& weight, at::ScalarType dtype) {
  return casts_as_it_is(weight) ? weight.contiguous() : weight.to(dtype).contiguous();
}

// Weight i's known amax where its tensorwise cast reads the weight as it is (a bf16 copy's amax may differ), else
// undefined.
at::Tensor weight_amax_at(at::ArrayRef<at::Tensor> weight_amax, size_t i, const at::Tensor& weight, const Plan& plan) {
  return i < weight_amax.size() && !plan.rowwise() && casts_as_it_is(weight) ? weight_amax[i] : at::Tensor();
}

// a [m, k] . b [n, k]^T with both operands' scales: [m, n] in `dtype`.
at::Tensor scaled_gemm(const Fp8Scaled& a, const Fp8Scaled& b, at::ScalarType dtype, bool fast_accum,
                       const Plan& plan) {
  if (!plan.fast) return quant::fp8_scaled_gemm_reference(a, b, dtype);
  if (!plan.rowwise()) {
    return at::_scaled_mm(a.codes, b.codes.t(), a.inverse, b.inverse, std::nullopt, std::nullopt, dtype, fast_accum);
  }
  const at::Tensor sa = a.inverse.unsqueeze(1), sb = b.inverse.unsqueeze(0);  // F32 [m, 1], [1, n]
  if (fast_accum) {
    return at::_scaled_mm(a.codes, b.codes.t(), sa, sb, std::nullopt, std::nullopt, at::kBFloat16, true).to(dtype);
  }
  // As torchao: the row-scaled GEMM without fast accumulation is slow, so the tensor-scaled one runs with unit scales
  // and the power-of-two scales multiply its result (exactly).
  const at::Tensor one = at::ones({}, a.inverse.options());
  at::Tensor y = at::_scaled_mm(a.codes, b.codes.t(), one, one, std::nullopt, std::nullopt, at::kBFloat16, false);
  return y.mul_(sa * sb).to(dtype);  // [m, n]
}

// The rows of x [n, cols] padded with zeros to a multiple of 16, for the fast path's GEMMs that reduce over them
// (zero rows add nothing to them). FP8 codes pad as bytes (code 0 is +0).
at::Tensor rows_to_16(const at::Tensor& x, const Plan& plan) {
  const int64_t extra = (16 - x.size(0) % 16) % 16;
  if (!plan.fast || extra == 0) return x;
  if (x.element_size() != 1) return at::constant_pad_nd(x, {0, 0, 0, extra});
  return at::constant_pad_nd(x.view(at::kByte), {0, 0, 0, extra}).view(x.scalar_type());
}

// The amax of gradient i, an F32 [] view of grad_amax [k], or undefined.
at::Tensor amax_at(const at::Tensor& grad_amax, size_t i) {
  return grad_amax.defined() ? grad_amax.select(0, static_cast<int64_t>(i)) : at::Tensor();
}

}  // namespace

at::ScalarType gemm_dtype(const at::Tensor& x, const at::Tensor& weight) {
  const auto device_type = x.device().type();
  return at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type)
                                                        : weight.scalar_type();
}

bool fast_path(const at::Tensor& x, const at::Tensor& weight, at::ScalarType dtype, const KernelPolicy& policy) {
  return policy.kernels_for(x) && dtype == at::kBFloat16 && fp8_tensor_cores(x.device()) && weight.size(0) % 16 == 0 &&
         weight.size(1) % 16 == 0;
}

std::vector<at::Tensor> group_forward(const at::Tensor& x, const at::Tensor& x_amax, at::TensorList weights,
                                      at::ArrayRef<at::Tensor> weight_amax, const Plan& plan, at::ScalarType dtype,
                                      std::vector<at::Tensor>& saved) {
  std::vector<at::Tensor> out;
  if (plan.rowwise()) saved.push_back(x);
  const Fp8Scaled xq = cast_for_forward(x, x_amax, plan, saved);
  for (size_t i = 0; i < weights.size(); ++i) {
    const at::Tensor& weight = weights[i];
    const Fp8Scaled wq = cast_for_forward(weight_for_cast(weight, dtype), weight_amax_at(weight_amax, i, weight, plan),
                                          plan, saved);                                                // [out_i, in]
    out.push_back(scaled_gemm(xq, wq, dtype, /*fast_accum=*/true, plan));                              // [N, out_i]
  }
  saved.insert(saved.end(), weights.begin(), weights.end());
  return out;
}

std::vector<at::Tensor> group_backward(const std::vector<at::Tensor>& grads, const at::Tensor& grad_amax,
                                       at::ArrayRef<at::Tensor> saved, const Plan& plan, at::ScalarType dtype,
                                       at::ScalarType x_dtype) {
  const size_t k = grads.size(), first_weight = saved.size() - k;
  // x read along tokens by every weight gradient, cast once: [in, N (padded to 16)]
  const Fp8Scaled x_by_columns =
      plan.rowwise() ? cast_columns(rows_to_16(saved[0], plan), Fp8Format::kE4m3, plan) : Fp8Scaled{saved[0], saved[1]};
  at::Tensor dx;  // [N, in], summed in x's dtype as autograd sums the input gradients of separate layers
  std::vector<at::Tensor> result{at::Tensor()};
  for (size_t i = 0; i < k; ++i) {
    const at::Tensor& weight = saved[first_weight + i];  // [out_i, in]
    if (!grads[i].defined()) {
      result.push_back(at::Tensor());
      continue;
    }
    const at::Tensor dy = grads[i].to(dtype).contiguous();  // [N, out_i]
    at::Tensor dx_i, dw;                                    // [N, in], [out_i, in]
    if (plan.rowwise()) {
      const Fp8Scaled dyq = cast_rows(dy, plan.grad_format(), plan);
      dx_i = scaled_gemm(dyq, cast_columns(weight_for_cast(weight, dtype), Fp8Format::kE4m3, plan), dtype, false, plan);
      dw = scaled_gemm(cast_columns(rows_to_16(dy, plan), plan.grad_format(), plan), x_by_columns, weight.scalar_type(),
                       false, plan);
    } else {
      const Fp8TwoLayouts dyq = cast_both(dy, plan.grad_format(), plan, amax_at(grad_amax, i));
      const Fp8Scaled w_by_columns{saved[2 + 2 * i], saved[3 + 2 * i]};  // W_i^T codes [in, out_i]
      dx_i = scaled_gemm(dyq.scaled, w_by_columns, dtype, false, plan);
      dw = scaled_gemm({dyq.codes_t, dyq.scaled.inverse}, x_by_columns, weight.scalar_type(), false, plan);
    }
    dx = dx.defined() ? dx.add_(dx_i.to(x_dtype)) : dx_i.to(x_dtype);
    result.push_back(dw);
  }
  result[0] = dx;
  return result;
}

}  // namespace fp8_detail

namespace {

using fp8_detail::Plan;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y_i [N, out_i] = x [N, in] W_i^T for the weights of projections that read the same x, and their backward, with
// FP8 GEMMs (the file comment has the scheme). Each weight has its own scales; x is cast once for all of them, in
// the forward and again (along tokens) for the weight gradients, where a Function per weight would cast it per weight.
class Fp8TrainedGemms : public torch::autograd::Function<Fp8TrainedGemms> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                               const std::vector<at::Tensor>& weight_amax, int64_t recipe, bool fast,
                               at::ScalarType dtype) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);  // it casts for itself
    ctx->saved_data["recipe"] = recipe;
    ctx->saved_data["fast"] = fast;
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    variable_list saved;
    const Plan plan{static_cast<Fp8Training>(recipe), fast};
    variable_list out =
        fp8_detail::group_forward(x.to(dtype).contiguous(), {}, weights, weight_amax, plan, dtype, saved);
    ctx->save_for_backward(saved);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const Plan plan{static_cast<Fp8Training>(ctx->saved_data["recipe"].toInt()), ctx->saved_data["fast"].toBool()};
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    variable_list result =
        fp8_detail::group_backward(grads, {}, ctx->get_saved_variables(), plan, dtype, x_dtype);  // dx, dW_i
    result.insert(result.end(), 4, at::Tensor());  // weight_amax, recipe, fast, dtype
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> fp8_training_linears(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                             Fp8Training recipe, const KernelPolicy& policy,
                                             const std::vector<at::Tensor>& weight_amax) {
  FT_CHECK(recipe != Fp8Training::kOff, "fp8_training_linears: the recipe is off");
  FT_CHECK(!weights.empty(), "fp8_training_linears: no weight");
  const at::ScalarType dtype = fp8_detail::gemm_dtype(x, weights[0]);
  const at::Tensor x2d = x.reshape({-1, x.size(-1)});  // [N, in]
  const bool fast = std::all_of(weights.begin(), weights.end(),
                                [&](const at::Tensor& w) { return fp8_detail::fast_path(x2d, w, dtype, policy); });
  FT_CHECK(weight_amax.empty() || weight_amax.size() == weights.size(),
           "fp8_training_linears: one known amax per weight, or none");
  std::vector<at::Tensor> out =
      Fp8TrainedGemms::apply(x2d, at::TensorList(weights), weight_amax, static_cast<int64_t>(recipe), fast, dtype);
  if (x.dim() == 2) return out;
  std::vector<int64_t> shape = x.sizes().vec();
  for (at::Tensor& y : out) {  // [N, out_i] -> [..., out_i]
    shape.back() = y.size(1);
    y = y.view(shape);
  }
  return out;
}

at::Tensor fp8_training_linear(const at::Tensor& x, const at::Tensor& weight, Fp8Training recipe,
                               const KernelPolicy& policy, const at::Tensor& weight_amax) {
  return fp8_training_linears(x, {weight}, recipe, policy, {weight_amax})[0];
}

std::vector<int64_t> fp8_edge_layers(int64_t num_layers, int64_t edge) {
  std::vector<int64_t> layers;
  for (int64_t i = 0; i < num_layers; ++i) {
    if (i < edge || i >= num_layers - edge) layers.push_back(i);
  }
  return layers;
}

std::vector<std::string> enable_fp8_training(Transformer& model, Fp8Training recipe, const Fp8Selection& selection) {
  std::vector<std::string> edge_prefixes;
  for (const int64_t i : fp8_edge_layers(model.args().num_layers, selection.edge_layers)) {
    edge_prefixes.push_back("model.layers." + std::to_string(i) + ".");  // Transformer::projections' paths
  }
  std::vector<std::string> left;
  for (auto& [projection_path, lin] : model.projections()) {
    const std::string& path = projection_path;  // C++17 lambdas cannot capture a structured binding
    const auto in_path = [&](const std::string& part) { return path.find(part) != std::string::npos; };
    if (std::any_of(edge_prefixes.begin(), edge_prefixes.end(),
                    [&](const std::string& prefix) { return path.rfind(prefix, 0) == 0; })) {
      continue;
    }
    const bool sized = lin->weight.defined() && lin->weight.size(0) % 16 == 0 && lin->weight.size(1) % 16 == 0 &&
                       std::min(lin->weight.size(0), lin->weight.size(1)) >= selection.min_features;
    if (std::any_of(selection.skip.begin(), selection.skip.end(), in_path) || !sized || lin->quantized()) {
      left.push_back(path);
      continue;
    }
    lin->fp8_training = recipe;
    if (recipe == Fp8Training::kTensorwise) lin->fp8_weight_amax = std::make_shared<quant::KnownAmax>();
  }
  return left;
}

std::map<std::string, std::shared_ptr<quant::KnownAmax>> fp8_weight_amax_sinks(const Transformer& model) {
  std::map<std::string, std::shared_ptr<quant::KnownAmax>> sinks;
  for (const auto& [path, lin] : model.projections()) {
    if (lin->fp8_weight_amax) sinks.emplace(path + ".weight", lin->fp8_weight_amax);
  }
  return sinks;
}

}  // namespace ft::model

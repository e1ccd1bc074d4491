#include "model/ops.h"

#include <ATen/autocast_mode.h>

#include <tuple>

#include "model/fp8_linear.h"
#include "model/fp8_training.h"
#include "model/norm.h"
#include "model/rope.h"
#include "model/swiglu.h"

namespace ft::model {

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor c = cos.to(x.scalar_type()).unsqueeze(2);                                   // [B, T, 1, D]
  const at::Tensor s = sin.to(x.scalar_type()).unsqueeze(2);                                   // [B, T, 1, D]
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);  // [B, T, H, D]
  return x * c + rotated * s;
}

namespace ops {
namespace {

// ATen's private fused RMSNorm, its positional arguments by name: x [..., dim] with weight [dim] of x's dtype.
at::Tensor aten_fused_rms_norm(const at::Tensor& x, const NormSpec& norm) {
  const std::vector<int64_t> normalized_shape = {norm.weight.size(0)};
  return std::get<0>(at::_fused_rms_norm(x, normalized_shape, norm.weight, norm.eps));  // [..., dim]
}

at::Tensor composite_rms_norm(const at::Tensor& x, const NormSpec& norm) {
  const auto in_dtype = x.scalar_type();
  at::Tensor h = x.to(at::kFloat);  // [..., dim]
  h = h * at::rsqrt(h.pow(2).mean(-1, true) + norm.eps);
  if (norm.unit_offset) return (h * (norm.weight.to(at::kFloat) + 1.0)).to(in_dtype);
  return norm.weight * h.to(in_dtype);
}

// The dtype of add_rms_norm's normed output: rms_norm's (weight * normalized-in-x's-dtype; Gemma: x's), or the
// autocast dtype the GEMMs would cast it to.
at::ScalarType normed_dtype(const at::Tensor& residual, const NormSpec& norm, bool gemm_input) {
  const auto device_type = residual.device().type();
  if (gemm_input && at::autocast::is_autocast_enabled(device_type))
    return at::autocast::get_autocast_dtype(device_type);
  return norm.unit_offset ? residual.scalar_type()
                          : at::promote_types(residual.scalar_type(), norm.weight.scalar_type());
}

// x [B, T, H, D] with all D dims rotated.
at::Tensor rotate_all(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const KernelPolicy& policy) {
  if (policy.kernels_for(x) && fused_rope_available(x, cos)) return fused_rope_apply(x, cos, sin);
  return apply_rotary(x, cos, sin);
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const NormSpec& norm, const KernelPolicy& policy) {
  if (policy.fused_for(x) && !norm.unit_offset && x.scalar_type() == norm.weight.scalar_type()) {
    return aten_fused_rms_norm(x, norm);
  }
  if (policy.kernels_for(x) && norm.unit_offset &&
      add_rms_norm_available(x, at::Tensor(), norm.weight, x.scalar_type())) {
    return fused_rms_norm(x, norm.weight, norm.eps, x.scalar_type(), 1.0);  // Gemma's F32 math, in x's dtype
  }
  return composite_rms_norm(x, norm);
}

std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& residual, const at::Tensor& delta,
                                               const NormSpec& norm, bool gemm_input, const KernelPolicy& policy) {
  if (!policy.kernels_for(residual)) {
    at::Tensor h = delta.defined() ? residual + delta : residual;  // [..., dim]
    return {h, rms_norm(h, norm, policy)};
  }
  const double offset = norm.unit_offset ? 1.0 : 0.0;
  const at::ScalarType out = normed_dtype(residual, norm, gemm_input);
  if (delta.defined() && add_rms_norm_available(residual, delta, norm.weight, out)) {
    return model::add_rms_norm(residual, delta, norm.weight, norm.eps, out, offset);
  }
  // Where the add cannot fuse, the norm of h still takes the one path a recompute from h alone takes.
  at::Tensor h = delta.defined() ? residual + delta : residual;  // [..., dim]
  if (add_rms_norm_available(h, at::Tensor(), norm.weight, out)) {
    return {h, fused_rms_norm(h, norm.weight, norm.eps, out, offset)};
  }
  return {h, rms_norm(h, norm, policy)};
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const KernelPolicy& policy) {
  const int64_t r = cos.size(-1), d = x.size(-1);
  if (r == d) return rotate_all(x, cos, sin, policy);
  return at::cat({rotate_all(x.narrow(-1, 0, r), cos, sin, policy), x.narrow(-1, r, d - r)}, -1);  // [B, T, H, D]
}

at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& joint, bool gelu_tanh,
                            const KernelPolicy& policy) {
  if (policy.kernels_for(gate) && fused_swiglu_available(gate, up)) {
    if (joint.defined()) return fused_swiglu_joint(joint, gelu_tanh).view(gate.sizes());
    return fused_swiglu(gate, up, gelu_tanh);
  }
  return (gelu_tanh ? at::gelu(gate, "tanh") : at::silu(gate)) * up;  // [..., I]
}

at::Tensor linear(const at::Tensor& x, const LinearWeight& weight, const KernelPolicy& policy) {
  at::Tensor y;  // [..., out]
  switch (weight.format) {
    case LinearWeight::Format::kDense:
      return at::linear(x, weight.values, weight.bias);
    case LinearWeight::Format::kNf4:
      y = nf4_linear(x, weight.nf4, weight.dtype, weight.nf4_compute, policy);
      break;
    case LinearWeight::Format::kFp8:
      y = fp8_linear(x, weight.fp8, weight.dtype, policy);
      break;
    case LinearWeight::Format::kFp8Training:
      y = fp8_training_linear(x, weight.values, weight.recipe, policy, weight.known_amax);
      break;
  }
  // In place: the GEMM's output is not saved for its backward. The bias in the GEMM's dtype, as at::linear under
  // autocast.
  if (weight.bias.defined()) y.add_(weight.bias.to(y.scalar_type()));
  return y;
}

}  // namespace ops
}  // namespace ft::model

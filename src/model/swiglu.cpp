#include "model/swiglu.h"

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/swiglu.h"
#include "model/kernel_dtype.h"
#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// t [..., C] as a [rows, C] matrix with contiguous columns: a view when the leading dims collapse, else a copy.
at::Tensor as_rows(const at::Tensor& t) {
  at::Tensor m = t.reshape({-1, t.size(-1)});
  if (m.size(1) > 1 && m.stride(1) != 1) m = m.contiguous();
  return m;
}

// m [rows, cols] with contiguous columns (a column block of a wider matrix too).
kernels::Matrix matrix(const at::Tensor& m) {
  const int64_t ld = m.size(0) > 1 ? m.stride(0) : m.size(1);
  return {m.data_ptr(), ld};
}

kernels::GateAct activation(bool gelu) {
  return gelu ? kernels::GateAct::kGeluTanh : kernels::GateAct::kSilu;
}

class SwigluPair : public torch::autograd::Function<SwigluPair> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up, bool gelu) {
    const at::Tensor g = as_rows(gate), u = as_rows(up);
    at::Tensor out = at::empty(g.sizes(), g.options().memory_format(at::MemoryFormat::Contiguous));  // [rows, I]
    swiglu_rows_forward(g, u, out, gelu, nullptr);
    ctx->save_for_backward({g, u});
    ctx->saved_data["gelu"] = gelu;
    ctx->saved_data["shape"] = gate.sizes().vec();
    return out.view(gate.sizes());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& g = saved[0];
    const at::Tensor& u = saved[1];
    const at::Tensor d = as_rows(grad_out[0].to(g.scalar_type()));
    at::Tensor dg = at::empty(g.sizes(), g.options().memory_format(at::MemoryFormat::Contiguous));
    at::Tensor du = at::empty_like(dg);
    swiglu_rows_backward(d, g, u, dg, du, ctx->saved_data["gelu"].toBool(), {});
    const auto shape = ctx->saved_data["shape"].toIntVector();
    return {dg.view(shape), du.view(shape), at::Tensor()};
  }
};

class SwigluJoint : public torch::autograd::Function<SwigluJoint> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up, bool gelu) {
    const at::Tensor gu = as_rows(gate_up);  // [N, 2 I]
    const int64_t n = gu.size(0), i = gu.size(1) / 2;
    at::Tensor out = at::empty({n, i}, gu.options().memory_format(at::MemoryFormat::Contiguous));
    swiglu_rows_forward(gu.narrow(1, 0, i), gu.narrow(1, i, i), out, gelu, nullptr);
    ctx->save_for_backward({gu});
    ctx->saved_data["gelu"] = gelu;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const at::Tensor gu = ctx->get_saved_variables()[0];
    const int64_t n = gu.size(0), i = gu.size(1) / 2;
    const at::Tensor d = as_rows(grad_out[0].to(gu.scalar_type()));
    at::Tensor dgu = at::empty({n, 2 * i}, gu.options().memory_format(at::MemoryFormat::Contiguous));
    swiglu_rows_backward(d, gu.narrow(1, 0, i), gu.narrow(1, i, i), dgu.narrow(1, 0, i), dgu.narrow(1, i, i),
                         ctx->saved_data["gelu"].toBool(), {});
    return {dgu, at::Tensor()};
  }
};

}  // namespace

void swiglu_rows_forward(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out, bool gelu_tanh,
                         float* out_amax) {
  kernels::swiglu_forward(matrix(gate), matrix(up), matrix(out), gate.size(0), gate.size(1),
                          kernel_dtype(gate.scalar_type()), stream_of(gate), activation(gelu_tanh), out_amax);
}

void swiglu_rows_backward(const at::Tensor& d_out, const at::Tensor& gate, const at::Tensor& up,
                          const at::Tensor& d_gate, const at::Tensor& d_up, bool gelu_tanh, kernels::GradAmax amax) {
  kernels::swiglu_backward(matrix(d_out), matrix(gate), matrix(up), matrix(d_gate), matrix(d_up), gate.size(0),
                           gate.size(1), kernel_dtype(gate.scalar_type()), stream_of(gate), activation(gelu_tanh),
                           amax);
}

bool fused_swiglu_available(const at::Tensor& gate, const at::Tensor& up) {
  return gate.is_cuda() && up.is_cuda() && gate.scalar_type() == up.scalar_type() &&
         kernel_supports(gate.scalar_type()) && gate.sizes() == up.sizes() && gate.dim() >= 1;
}

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up, bool gelu_tanh) {
  FT_CHECK(fused_swiglu_available(gate, up), "fused swiglu: gate and up must be CUDA tensors of one shape and dtype");
  return SwigluPair::apply(gate, up, gelu_tanh);
}

at::Tensor fused_swiglu_joint(const at::Tensor& gate_up, bool gelu_tanh) {
  FT_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0 && fused_swiglu_available(gate_up, gate_up),
           "fused swiglu: gate_up must be a CUDA [N, 2 I] tensor");
  return SwigluJoint::apply(gate_up, gelu_tanh);
}

}  // namespace ft::model

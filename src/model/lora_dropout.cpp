#include "model/lora_dropout.h"

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

#include "kernels/dropout.h"
#include "model/kernel_dtype.h"
#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct PhiloxSeed {
  uint64_t seed;
  uint64_t offset;
};

// Reserves the next draws of the default generator of `device`, as ATen's own CUDA dropout does.
PhiloxSeed reserve_draws(const at::Device& device) {
  at::Generator gen = at::cuda::detail::getDefaultCUDAGenerator(device.index());
  at::PhiloxCudaState state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get<at::CUDAGeneratorImpl>()->philox_cuda_state(kernels::kDropoutWordsPerCall);
  }
  FT_CHECK(!state.captured_, "fused adapter dropout does not run under CUDA graph capture");
  return {state.seed_.val, state.offset_.val};
}

// out = dropout(in) with the mask of (seed, offset); in and out contiguous, of one dtype and size (may be one tensor).
void apply_mask(const at::Tensor& in, at::Tensor& out, double p, PhiloxSeed s) {
  kernels::dropout_apply(in.const_data_ptr(), out.data_ptr(), in.numel(), static_cast<float>(p), s.seed, s.offset,
                         kernel_dtype(in.scalar_type()), stream_of(in));
}

// The seed travels in saved_data as an int64 with the same bits.
int64_t as_saved(uint64_t v) {
  return static_cast<int64_t>(v);
}
uint64_t from_saved(const c10::IValue& v) {
  return static_cast<uint64_t>(v.toInt());
}

class DroppedDown : public torch::autograd::Function<DroppedDown> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& a, double p) {
    const PhiloxSeed s = reserve_draws(h.device());
    at::Tensor dropped = at::empty_like(h);  // [N, in], freed after the GEMM
    apply_mask(h, dropped, p, s);
    at::Tensor down = at::mm(dropped, a.t());  // [N, r]
    ctx->save_for_backward({h, a});
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = as_saved(s.seed);
    ctx->saved_data["offset"] = as_saved(s.offset);
    return down;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& h = saved[0];  // [N, in]
    const at::Tensor& a = saved[1];  // [r, in]
    const double p = ctx->saved_data["p"].toDouble();
    const PhiloxSeed s{from_saved(ctx->saved_data["seed"]), from_saved(ctx->saved_data["offset"])};
    const at::Tensor g = grad_out[0].to(h.scalar_type()).contiguous();  // [N, r]
    const bool want_dh = ctx->needs_input_grad(0), want_da = ctx->needs_input_grad(1);
    at::Tensor dh = want_dh ? at::mm(g, a) : at::Tensor();        // [N, in], masked in place below
    at::Tensor dropped = want_da ? at::empty_like(h) : at::Tensor();  // [N, in], the forward's, drawn again
    if (want_dh && want_da) {
      // One pass draws the mask once for both.
      kernels::dropout_apply2(h.const_data_ptr(), dropped.data_ptr(), dh.const_data_ptr(), dh.data_ptr(), h.numel(),
                              static_cast<float>(p), s.seed, s.offset, kernel_dtype(h.scalar_type()), stream_of(h));
    } else if (want_dh) {
      apply_mask(dh, dh, p, s);
    } else if (want_da) {
      apply_mask(h, dropped, p, s);
    }
    const at::Tensor da = want_da ? at::mm(g.t(), dropped) : at::Tensor();  // [r, in]
    return {dh, da, at::Tensor()};
  }
};

}  // namespace

bool fused_lora_dropout_available(const at::Tensor& h) {
  return h.is_cuda() && kernel_supports(h.scalar_type());
}

at::Tensor fused_lora_dropout_down(const at::Tensor& h, const at::Tensor& a, double p) {
  FT_CHECK(fused_lora_dropout_available(h) && h.dim() == 2 && a.dim() == 2 && a.size(1) == h.size(1) &&
               a.scalar_type() == h.scalar_type() && a.device() == h.device(),
           "fused adapter dropout: h [N, in] and a [r, in] must be CUDA tensors of one supported dtype");
  FT_CHECK(p > 0.0 && p < 1.0, "fused adapter dropout: p must be in (0, 1)");
  return DroppedDown::apply(h.contiguous(), a, p);
}

}  // namespace ft::model

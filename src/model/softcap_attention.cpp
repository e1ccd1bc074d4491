#include "model/softcap_attention.h"

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/softcap_softmax.h"
#include "model/kernel_dtype.h"
#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The kernel's row layout for scores [B, Hkv, G * T, S]: rows run over batch, heads (KV head, then group) and
// queries, which is [B, H, T] since query head h reads KV head h / G.
kernels::SoftcapRows rows_of(const at::Tensor& scores, int64_t queries, const at::Tensor& mask, bool causal,
                             double scale, double cap) {
  kernels::SoftcapRows r;
  r.cols = scores.size(-1);
  r.rows = scores.numel() / r.cols;
  r.queries = queries;
  r.rows_per_batch = scores.size(1) * scores.size(2);
  r.offset = r.cols - queries;
  r.causal = causal && mask.numel() == 0;
  if (mask.numel() > 0) {
    r.mask = mask.data_ptr<bool>();
    r.mask_batch_stride = mask.size(0) > 1 ? queries * r.cols : 0;
  }
  r.scale = static_cast<float>(scale);
  r.cap = static_cast<float>(cap);
  return r;
}

class SoftcapAttention : public torch::autograd::Function<SoftcapAttention> {
 public:
  // q [B, H, T, D], k/v [B, Hkv, S, D], mask Bool [B or 1, 1, T, S] or empty (no mask: autograd's Function takes
  // no undefined tensor input).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, bool causal, double scale, double cap) {
    const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3), hkv = k.size(1);
    const at::Tensor qg = q.reshape({b, hkv, h / hkv * t, d});                  // [B, Hkv, G T, D]
    const at::Tensor m = mask.to(q.device()).contiguous();                     // Bool [B or 1, 1, T, S] or empty
    at::Tensor scores = at::matmul(qg, k.transpose(2, 3)).contiguous();       // [B, Hkv, G T, S]: in q k^T, out t
    at::Tensor probs = at::empty_like(scores);                                  // [B, Hkv, G T, S]
    const auto rows = rows_of(scores, t, m, causal, scale, cap);
    kernels::softcap_softmax_forward(rows, scores.data_ptr(), probs.data_ptr(), kernel_dtype(scores.scalar_type()),
                                     stream_of(q));
    const at::Tensor out = at::matmul(probs, v);  // [B, Hkv, G T, D]
    ctx->save_for_backward({qg, k, v, scores, probs, m});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["cap"] = cap;
    ctx->saved_data["shape"] = q.sizes().vec();
    return out.view({b, h, t, d});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &qg = saved[0], &k = saved[1], &v = saved[2], &tanh_s = saved[3], &probs = saved[4],
                     &m = saved[5];
    const auto shape = ctx->saved_data["shape"].toIntVector();  // [B, H, T, D]
    const at::Tensor d_out = grad_out[0].to(qg.scalar_type()).reshape(qg.sizes());  // [B, Hkv, G T, D]
    const at::Tensor d_v = at::matmul(probs.transpose(2, 3), d_out);                // [B, Hkv, S, D]
    at::Tensor d_s = at::matmul(d_out, v.transpose(2, 3)).contiguous();            // [B, Hkv, G T, S]: dP, then dS
    const auto rows = rows_of(d_s, shape[2], m, ctx->saved_data["causal"].toBool(),
                              ctx->saved_data["scale"].toDouble(), ctx->saved_data["cap"].toDouble());
    kernels::softcap_softmax_backward(rows, tanh_s.data_ptr(), probs.data_ptr(), d_s.data_ptr(),
                                      kernel_dtype(d_s.scalar_type()), stream_of(d_s));
    const at::Tensor d_q = at::matmul(d_s, k).view(shape);    // [B, H, T, D]
    const at::Tensor d_k = at::matmul(d_s.transpose(2, 3), qg);  // [B, Hkv, S, D]
    return {d_q, d_k, d_v, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_softcap_available(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return q.is_cuda() && k.is_cuda() && v.is_cuda() && kernel_supports(q.scalar_type()) &&
         k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() && q.dim() == 4 && k.dim() == 4 &&
         v.dim() == 4 && k.size(1) > 0 && q.size(1) % k.size(1) == 0;
}

at::Tensor fused_softcapped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& mask, bool causal, double scale, double cap) {
  FT_CHECK(fused_softcap_available(q, k, v), "fused soft-capped attention: q, k and v must be CUDA tensors of one "
                                             "dtype with a head count divisible by the KV head count");
  FT_CHECK(!mask.defined() || (mask.scalar_type() == at::kBool && mask.dim() == 4 && mask.size(1) == 1 &&
                               mask.size(2) == q.size(2) && mask.size(3) == k.size(2) &&
                               (mask.size(0) == 1 || mask.size(0) == q.size(0))),
           "fused soft-capped attention: the mask must be Bool [B or 1, 1, T, S]");
  const at::Tensor m = mask.defined() ? mask : at::empty({0}, q.options().dtype(at::kBool));
  return SoftcapAttention::apply(q, k, v, m, causal, scale, cap);
}

}  // namespace ft::model

#include "model/short_attention.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>

#include "kernels/short_attention.h"
#include "model/kernel_dtype.h"
#include "util/error.h"

namespace ft::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

kernels::ShortAttentionShape shape_of(const at::Tensor& q, const at::Tensor& k, double scale) {
  kernels::ShortAttentionShape s;
  s.tokens = q.size(0);
  s.heads = static_cast<int>(q.size(1));
  s.kv_heads = static_cast<int>(k.size(1));
  s.head_dim = static_cast<int>(q.size(2));
  s.scale = static_cast<float>(scale);
  return s;
}

// A contiguous tensor whose data starts on a 16-byte boundary, as the kernels' vector loads need.
at::Tensor kernel_ready(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return aligned16(c) ? c : c.clone();
}

class ShortPieceAttention : public torch::autograd::Function<ShortPieceAttention> {
 public:
  // q [N, H, D], k/v [N, Hkv, D], piece_start I32 [N]; returns out [N, H, D].
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, const at::Tensor& piece_start, double scale) {
    const at::Tensor q = kernel_ready(q_in), k = kernel_ready(k_in), v = kernel_ready(v_in);
    at::Tensor out = at::empty_like(q);                                                 // [N, H, D]
    at::Tensor lse = at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat));  // F32 [H, N]
    kernels::short_attention_forward(shape_of(q, k, scale), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                     piece_start.data_ptr<int32_t>(), out.data_ptr(), lse.data_ptr<float>(),
                                     kernel_dtype(q.scalar_type()), stream_of(q));
    ctx->save_for_backward({q, k, v, out, lse, piece_start});
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4],
                     &piece_start = saved[5];
    const at::Tensor d_out = kernel_ready(grad_out[0].to(q.scalar_type()));  // [N, H, D]
    at::Tensor d_q = at::empty_like(q), d_k = at::empty_like(k), d_v = at::empty_like(v);
    at::Tensor delta = at::empty_like(lse);  // F32 [H, N]: rowsum(d_out * out)
    kernels::ShortAttentionGrads g;
    g.d_out = d_out.data_ptr();
    g.d_q = d_q.data_ptr();
    g.d_k = d_k.data_ptr();
    g.d_v = d_v.data_ptr();
    g.delta = delta.data_ptr<float>();
    kernels::short_attention_backward(shape_of(q, k, ctx->saved_data["scale"].toDouble()), q.data_ptr(), k.data_ptr(),
                                      v.data_ptr(), out.data_ptr(), piece_start.data_ptr<int32_t>(),
                                      lse.data_ptr<float>(), g, kernel_dtype(q.scalar_type()), stream_of(q));
    return {d_q, d_k, d_v, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool short_attention_available(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t max_seqlen) {
  if (!q.is_cuda() || !k.is_cuda() || !v.is_cuda() || q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type()) return false;
  if (q.scalar_type() != at::kBFloat16 && q.scalar_type() != at::kHalf) return false;
  const int64_t kv_heads = k.size(2);
  return max_seqlen <= kernels::kShortPieceMax && kv_heads > 0 && q.size(2) % kv_heads == 0 &&
         kernels::short_attention_supports(static_cast<int>(q.size(3)), kernel_dtype(q.scalar_type()));
}

at::Tensor short_piece_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& piece_start, double scale) {
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), d = q.size(3);
  FT_CHECK(piece_start.scalar_type() == at::kInt && piece_start.numel() == b * t,
           "short piece attention: piece_start must be I32 [B * T]");
  const at::Tensor out = ShortPieceAttention::apply(q.reshape({b * t, h, d}), k.reshape({b * t, k.size(2), d}),
                                                    v.reshape({b * t, v.size(2), d}), piece_start, scale);
  return out.view({b, t, h * d});  // [B, T, H * D]
}

}  // namespace ft::model

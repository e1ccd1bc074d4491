#include "model/layers.h"

#include <cmath>
#include <limits>

#include <ATen/autocast_mode.h>

#include "model/norm.h"
#include "model/rope.h"
#include "model/softcap_attention.h"
#include "model/swiglu.h"
#include "util/error.h"

namespace ft::model {

std::pair<at::Tensor, at::Tensor> KVCache::append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  if (static_cast<int64_t>(keys.size()) <= layer) {
    keys.resize(layer + 1);
    values.resize(layer + 1);
  }
  const int64_t t = k.size(2);
  at::Tensor& kb = keys[layer];
  at::Tensor& vb = values[layer];
  if (!kb.defined() || kb.size(2) < length + t) {
    // Grow geometrically so decoding N tokens copies O(N) elements in total.
    const int64_t capacity = std::max<int64_t>(length + t, kb.defined() ? 2 * kb.size(2) : length + t + 64);
    auto grow = [&](at::Tensor& buf, const at::Tensor& like) {
      at::Tensor bigger = at::empty({like.size(0), like.size(1), capacity, like.size(3)}, like.options());
      if (buf.defined() && length > 0) bigger.narrow(2, 0, length).copy_(buf.narrow(2, 0, length));
      buf = bigger;
    };
    grow(kb, k);
    grow(vb, v);
  }
  kb.narrow(2, length, t).copy_(k);
  vb.narrow(2, length, t).copy_(v);
  return {kb.narrow(2, 0, length + t), vb.narrow(2, 0, length + t)};
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_, bool unit_offset_) : eps(eps_), unit_offset(unit_offset_) {
  weight = register_parameter("weight", unit_offset ? at::zeros({dim}) : at::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  if (fused && !unit_offset && x.is_cuda() && x.scalar_type() == weight.scalar_type()) {
    return std::get<0>(at::_fused_rms_norm(x, {weight.size(0)}, weight, eps));
  }
  if (fused && unit_offset && add_rms_norm_available(x, at::Tensor(), weight, x.scalar_type())) {
    return fused_rms_norm(x, weight, eps, x.scalar_type(), 1.0);  // Gemma's F32 math, in x's dtype
  }
  const auto in_dtype = x.scalar_type();
  at::Tensor h = x.to(at::kFloat);
  h = h * at::rsqrt(h.pow(2).mean(-1, true) + eps);
  if (unit_offset) return (h * (weight.to(at::kFloat) + 1.0)).to(in_dtype);
  return weight * h.to(in_dtype);
}

std::pair<at::Tensor, at::Tensor> RMSNormImpl::add_forward(const at::Tensor& residual, const at::Tensor& delta,
                                                           bool gemm_input) {
  if (!fused || !residual.is_cuda()) {
    at::Tensor h = delta.defined() ? residual + delta : residual;
    return {h, forward(h)};
  }
  const double offset = unit_offset ? 1.0 : 0.0;
  // forward's dtype (weight * normalized-in-x's-dtype; Gemma: x's), or the autocast dtype the GEMMs would cast to.
  const auto device_type = residual.device().type();
  const at::ScalarType out = gemm_input && at::autocast::is_autocast_enabled(device_type)
                                 ? at::autocast::get_autocast_dtype(device_type)
                             : unit_offset ? residual.scalar_type()
                                           : at::promote_types(residual.scalar_type(), weight.scalar_type());
  if (delta.defined() && add_rms_norm_available(residual, delta, weight, out)) {
    return add_rms_norm(residual, delta, weight, eps, out, offset);
  }
  // Where the add cannot fuse, the norm of h still takes the one path a recompute from h alone takes.
  at::Tensor h = delta.defined() ? residual + delta : residual;
  if (add_rms_norm_available(h, at::Tensor(), weight, out)) return {h, fused_rms_norm(h, weight, eps, out, offset)};
  return {h, forward(h)};
}

Rotary::Rotary(const ModelArgs& a) {
  const int64_t dim = a.rotary_dim();
  at::Tensor exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  at::Tensor inv = 1.0 / at::pow(a.rope_theta, exponent);
  if (a.rope_scaling.type == "longrope") {  // transformers' _compute_longrope_parameters
    const auto& s = a.rope_scaling;
    const at::Tensor base = at::pow(a.rope_theta, exponent);
    inv = 1.0 / (at::tensor(s.short_factor, at::kDouble).to(at::kFloat) * base);
    long_inv_freq_ = 1.0 / (at::tensor(s.long_factor, at::kDouble).to(at::kFloat) * base);
    original_context_ = s.original_max_position_embeddings;
    const double context = static_cast<double>(original_context_);
    const double factor = s.longrope_factor.value_or(static_cast<double>(a.max_position_embeddings) / context);
    scale_ = s.attention_factor.value_or(factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(context)));
  }
  if (a.rope_scaling.type == "linear") inv = inv / a.rope_scaling.factor;  // positions slowed down by the factor
  if (a.rope_scaling.type == "llama3") {
    const auto& s = a.rope_scaling;
    const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_ctx / s.low_freq_factor;
    const double high_wavelen = old_ctx / s.high_freq_factor;
    at::Tensor wavelen = 2.0 * 3.141592653589793 / inv;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv / s.factor, inv);
    at::Tensor smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
    at::Tensor medium = at::logical_not(wavelen < high_wavelen).logical_and(at::logical_not(wavelen > low_wavelen));
    inv = at::where(medium, smoothed, scaled);
  }
  inv_freq_ = inv;
}

std::pair<at::Tensor, at::Tensor> Rotary::cos_sin(const at::Tensor& position_ids) const {
  at::Tensor pos = position_ids.to(at::kFloat);  // [B, T]
  at::Tensor inv = inv_freq_.to(pos.device());   // [R/2]
  if (long_inv_freq_.defined()) {
    // As transformers' longrope update: the long factors for the whole call once a position reaches the original
    // context (a tensor condition, so no host sync).
    inv = at::where(position_ids.max() + 1 > original_context_, long_inv_freq_.to(pos.device()), inv);
  }
  at::Tensor freqs = pos.unsqueeze(-1) * inv;    // [B, T, R/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);  // [B, T, R]
  if (scale_ != 1.0) return {emb.cos() * scale_, emb.sin() * scale_};
  return {emb.cos(), emb.sin()};
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor c = cos.to(x.scalar_type()).unsqueeze(2);  // [B, T, 1, D]
  at::Tensor s = sin.to(x.scalar_type()).unsqueeze(2);
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * c + rotated * s;
}

AttentionImpl::AttentionImpl(const ModelArgs& a)
    : num_heads(a.num_heads), num_kv_heads(a.num_kv_heads), head_dim(a.head_dim) {
  if (a.query_pre_attn_scalar) scale = 1.0 / std::sqrt(*a.query_pre_attn_scalar);
  softcap = a.attn_logit_softcapping;
  if (a.fused_projections) {
    qkv_proj = register_module(
        "qkv_proj", Linear(a.hidden_size, (a.num_heads + 2 * a.num_kv_heads) * a.head_dim, a.attention_bias));
  } else {
    q_proj = register_module("q_proj", Linear(a.hidden_size, a.num_heads * a.head_dim, a.attention_bias));
    k_proj = register_module("k_proj", Linear(a.hidden_size, a.num_kv_heads * a.head_dim, a.attention_bias));
    v_proj = register_module("v_proj", Linear(a.hidden_size, a.num_kv_heads * a.head_dim, a.attention_bias));
  }
  o_proj = register_module("o_proj", Linear(a.num_heads * a.head_dim, a.hidden_size, a.o_proj_bias));
  if (a.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(a.head_dim, a.rms_norm_eps, a.gemma));
    k_norm = register_module("k_norm", RMSNorm(a.head_dim, a.rms_norm_eps, a.gemma));
  }
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                  const AttentionMask& mask, KVCache* cache, int64_t layer_index) {
  const int64_t b = x.size(0), t = x.size(1);
  auto rotate = [&](const at::Tensor& h) {
    return fused_rope && fused_rope_available(h, cos) ? fused_rope_apply(h, cos, sin) : apply_rotary(h, cos, sin);
  };
  // Partial rotary (phi3's partial_rotary_factor): the first cos.size(-1) dims of each head turn, the rest pass.
  auto rotary = [&](const at::Tensor& h) {
    const int64_t r = cos.size(-1);
    if (r == head_dim) return rotate(h);
    return at::cat({rotate(h.narrow(-1, 0, r)), h.narrow(-1, r, head_dim - r)}, -1);
  };
  std::vector<at::Tensor> qkv;  // [B, T, H * D], [B, T, Hkv * D], [B, T, Hkv * D]
  if (qkv_proj) {
    const at::Tensor y = qkv_proj->forward(x, fused_linears && x.is_cuda());  // [B, T, (H + 2 Hkv) D]
    const int64_t nq = num_heads * head_dim, nkv = num_kv_heads * head_dim;
    qkv = {y.narrow(-1, 0, nq), y.narrow(-1, nq, nkv), y.narrow(-1, nq + nkv, nkv)};
  } else {
    qkv = linear_group(x, {q_proj.get(), k_proj.get(), v_proj.get()}, fused_linears && x.is_cuda()).outputs;
  }
  // q, k and v may be column blocks of one GEMM output [N, (H + 2 Hkv) D]. What backward keeps of them (v, and the
  // per-head norms' inputs) is copied out, so that the joint output is freed after this forward: a view saved for
  // backward would keep all of it (2.5 GiB more for an 8B model at 8,192 tokens). No copy when they are apart.
  // Per-head norm (qwen3): in F32 with an F32 weight, back to the projection's dtype so q, k and v agree.
  auto head_norm = [](RMSNorm& norm, const at::Tensor& h) {
    return norm ? norm->forward(h.contiguous()).to(h.scalar_type()) : h;
  };
  at::Tensor q = rotary(head_norm(q_norm, qkv[0].view({b, t, num_heads, head_dim})));     // [B, T, H, D]
  at::Tensor k = rotary(head_norm(k_norm, qkv[1].view({b, t, num_kv_heads, head_dim})));  // [B, T, Hkv, D]
  at::Tensor v = qkv[2].view({b, t, num_kv_heads, head_dim}).contiguous();                // [B, T, Hkv, D]
  if (mask.varlen()) {
    // Packed rows: every piece is its own causal sequence over the flattened tokens; no [T, T] mask exists.
    FT_CHECK(cache == nullptr, "varlen attention cannot use a KV cache");
    const at::Tensor fq = q.reshape({b * t, num_heads, head_dim});
    const at::Tensor fk = k.reshape({b * t, num_kv_heads, head_dim});
    const at::Tensor fv = v.reshape({b * t, num_kv_heads, head_dim});
    const int64_t n = mask.max_seqlen;
    at::Tensor out;         // [B * T, H, D]
    if (mask.window > 0) {  // a query sees itself and the window - 1 keys before it
      out = std::get<0>(at::_flash_attention_forward(fq, fk, fv, mask.cu_seqlens, mask.cu_seqlens, n, n, 0.0, true,
                                                     false, scale, mask.window - 1, int64_t{0}));
    } else {
      out = std::get<0>(
          at::_flash_attention_forward(fq, fk, fv, mask.cu_seqlens, mask.cu_seqlens, n, n, 0.0, true, false, scale));
    }
    return o_proj->forward(out.view({b, t, num_heads * head_dim}), fused_linears && out.is_cuda());
  }
  q = q.transpose(1, 2);                                                    // [B, H, T, D]
  k = k.transpose(1, 2);                                                    // [B, Hkv, T, D]
  v = v.transpose(1, 2);                                                    // [B, Hkv, T, D]
  if (cache != nullptr) std::tie(k, v) = cache->append(layer_index, k, v);  // [B, Hkv, S, D]
  const bool gqa = num_heads != num_kv_heads;
  at::Tensor out;  // [B, H, T, D]
  if (softcap) {
    const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
    out = fused_softcap && fused_softcap_available(q, k, v)
              ? fused_softcapped_attention(q, k, v, mask.mask, mask.causal, s, *softcap)
              : softcapped_attention(q, k, v, mask.mask, mask.causal, s, *softcap);
  } else {
    // SDPA needs matching dtypes; under autocast q/k/v already agree, and the cache keeps the dtype it was given.
    const std::optional<at::Tensor> attn_mask =
        mask.mask.defined() ? std::optional<at::Tensor>(mask.mask) : std::nullopt;
    out = at::scaled_dot_product_attention(q, k, v, attn_mask, 0.0, mask.causal && !mask.mask.defined(), scale, gqa);
  }
  out = out.transpose(1, 2).reshape({b, t, num_heads * head_dim});
  return o_proj->forward(out, fused_linears && out.is_cuda());
}

MLPImpl::MLPImpl(const ModelArgs& a)
    : intermediate_size(a.intermediate_size), gelu_tanh(a.hidden_act == "gelu_pytorch_tanh") {
  if (a.fused_projections) {
    gate_up_proj = register_module("gate_up_proj", Linear(a.hidden_size, 2 * a.intermediate_size, a.mlp_bias));
  } else {
    gate_proj = register_module("gate_proj", Linear(a.hidden_size, a.intermediate_size, a.mlp_bias));
    up_proj = register_module("up_proj", Linear(a.hidden_size, a.intermediate_size, a.mlp_bias));
  }
  down_proj = register_module("down_proj", Linear(a.intermediate_size, a.hidden_size, a.mlp_bias));
}

at::Tensor MLPImpl::forward(const at::Tensor& x) {
  const bool fused = fused_linears && x.is_cuda();
  if (gate_up_proj) {
    const at::Tensor gu = gate_up_proj->forward(x, fused);  // [B, T, 2 I], gate first
    const at::Tensor gate = gu.narrow(-1, 0, intermediate_size), up = gu.narrow(-1, intermediate_size, intermediate_size);
    if (fused && fused_swiglu_available(gate, up)) {
      return down_proj->forward(fused_swiglu_joint(gu.reshape({-1, 2 * intermediate_size})).view(gate.sizes()), fused);
    }
    return down_proj->forward(at::silu(gate) * up, fused);
  }
  const LinearGroupOutput gu = linear_group(x, {gate_proj.get(), up_proj.get()}, fused);
  const at::Tensor& gate = gu.outputs[0];  // [B, T, I]
  const at::Tensor& up = gu.outputs[1];    // [B, T, I]
  if (!fused || !fused_swiglu_available(gate, up)) {
    return down_proj->forward((gelu_tanh ? at::gelu(gate, "tanh") : at::silu(gate)) * up, fused);
  }
  if (gu.joint.defined()) return down_proj->forward(fused_swiglu_joint(gu.joint, gelu_tanh).view(gate.sizes()), fused);
  return down_proj->forward(fused_swiglu(gate, up, gelu_tanh), fused);
}

DecoderLayerImpl::DecoderLayerImpl(const ModelArgs& a, int64_t index_) : index(index_) {
  self_attn = register_module("self_attn", Attention(a));
  mlp = register_module("mlp", MLP(a));
  input_layernorm = register_module("input_layernorm", RMSNorm(a.hidden_size, a.rms_norm_eps, a.gemma));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(a.hidden_size, a.rms_norm_eps, a.gemma));
  if (a.gemma) {
    pre_feedforward_layernorm =
        register_module("pre_feedforward_layernorm", RMSNorm(a.hidden_size, a.rms_norm_eps, true));
    post_feedforward_layernorm =
        register_module("post_feedforward_layernorm", RMSNorm(a.hidden_size, a.rms_norm_eps, true));
  }
}

std::pair<at::Tensor, at::Tensor> DecoderLayerImpl::forward(const at::Tensor& residual, const at::Tensor& pending,
                                                            const at::Tensor& cos, const at::Tensor& sin,
                                                            const AttentionMask& mask, KVCache* cache) {
  const auto [h, normed] = input_norm(residual, pending);
  return forward_normed(h, normed, cos, sin, mask, cache);
}

std::pair<at::Tensor, at::Tensor> DecoderLayerImpl::input_norm(const at::Tensor& residual, const at::Tensor& pending) {
  return input_layernorm->add_forward(residual, pending, /*gemm_input=*/true);
}

std::pair<at::Tensor, at::Tensor> DecoderLayerImpl::forward_normed(const at::Tensor& h, const at::Tensor& normed,
                                                                   const at::Tensor& cos, const at::Tensor& sin,
                                                                   const AttentionMask& mask, KVCache* cache) {
  const at::Tensor attn = self_attn->forward(normed, cos, sin, mask, cache, index);  // [B, T, hidden]
  if (pre_feedforward_layernorm) {  // gemma: the normed outputs of attention and MLP join the stream
    const auto [h2, normed2] =
        pre_feedforward_layernorm->add_forward(h, post_attention_layernorm->forward(attn), /*gemm_input=*/true);
    return {h2, post_feedforward_layernorm->forward(mlp->forward(normed2))};
  }
  const auto [h2, normed2] = post_attention_layernorm->add_forward(h, attn, /*gemm_input=*/true);
  return {h2, mlp->forward(normed2)};
}

}  // namespace ft::model

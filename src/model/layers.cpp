#include "model/layers.h"

#include <algorithm>
#include <cmath>

#include "model/fp8_training.h"
#include "util/error.h"

namespace ft::model {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_, bool unit_offset_) : eps(eps_), unit_offset(unit_offset_) {
  weight = register_parameter("weight", unit_offset ? at::zeros({dim}) : at::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x, const KernelPolicy& policy) {
  return ops::rms_norm(x, spec(), policy);
}

std::pair<at::Tensor, at::Tensor> RMSNormImpl::add_forward(const at::Tensor& residual, const at::Tensor& delta,
                                                           bool gemm_input, const KernelPolicy& policy) {
  return ops::add_rms_norm(residual, delta, spec(), gemm_input, policy);
}

namespace {

// transformers' _compute_yarn_parameters: pairs that turn fewer than beta_slow times over the original context are
// interpolated (slowed down by the factor), those turning more than beta_fast times keep their frequency, and a
// linear ramp blends the ones between. In F32 with transformers' order of operations. F32 [R/2].
at::Tensor yarn_inv_freq(const ModelArgs& a, const at::Tensor& exponent) {
  const auto& s = a.rope_scaling;
  const double dim = static_cast<double>(a.rotary_dim());
  const double context = static_cast<double>(s.original_max_position_embeddings);
  // The pair index whose wavelength fits `rotations` times into the original context.
  auto pair_of = [&](double rotations) {
    return dim * std::log(context / (rotations * 2 * 3.141592653589793)) / (2 * std::log(a.rope_theta));
  };
  double low = pair_of(s.beta_fast), high = pair_of(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // as transformers: no zero-width ramp
  const at::Tensor pos_freqs = at::pow(a.rope_theta, exponent);
  const at::Tensor ramp = ((at::arange(a.rotary_dim() / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
  const at::Tensor keep = 1 - ramp;  // 1: the pair keeps its frequency (extrapolation)
  return (1.0 / (s.factor * pos_freqs)) * (1 - keep) + (1.0 / pos_freqs) * keep;
}

// YaRN's cos/sin scale: config.json's attention_factor, else 0.1 ln(factor) + 1 (DeepSeek's mscale ratio when both
// mscale and mscale_all_dim are set and non-zero).
double yarn_attention_factor(const RopeScaling& s) {
  if (s.attention_factor) return *s.attention_factor;
  auto mscale = [&](double m) { return s.factor <= 1.0 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0; };
  if (s.mscale.value_or(0.0) != 0.0 && s.mscale_all_dim.value_or(0.0) != 0.0) {
    return mscale(*s.mscale) / mscale(*s.mscale_all_dim);
  }
  return mscale(1.0);
}

}  // namespace

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
  if (a.rope_scaling.type == "yarn") {
    inv = yarn_inv_freq(a, exponent);
    scale_ = yarn_attention_factor(a.rope_scaling);
  }
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

AttentionImpl::AttentionImpl(const ModelArgs& a)
    : num_heads(a.num_heads), num_kv_heads(a.num_kv_heads), head_dim(a.head_dim) {
  if (a.query_pre_attn_scalar) scores.scale = 1.0 / std::sqrt(*a.query_pre_attn_scalar);
  scores.softcap = a.attn_logit_softcapping;
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

std::array<at::Tensor, 3> AttentionImpl::project(const at::Tensor& x, const LayerContext& ctx) {
  const KernelPolicy& policy = *ctx.policy;
  const int64_t b = x.size(0), t = x.size(1);
  std::vector<at::Tensor> qkv;  // [B, T, H * D], [B, T, Hkv * D], [B, T, Hkv * D]
  if (qkv_proj) {
    const at::Tensor y = qkv_proj->forward(x, policy);  // [B, T, (H + 2 Hkv) D]
    const int64_t nq = num_heads * head_dim, nkv = num_kv_heads * head_dim;
    qkv = {y.narrow(-1, 0, nq), y.narrow(-1, nq, nkv), y.narrow(-1, nq + nkv, nkv)};
  } else {
    qkv = linear_group(x, {q_proj.get(), k_proj.get(), v_proj.get()}, policy).outputs;
  }
  // q, k and v may be column blocks of one GEMM output [N, (H + 2 Hkv) D]. What backward keeps of them (v, and the
  // per-head norms' inputs) is copied out, so that the joint output is freed after this forward: a view saved for
  // backward would keep all of it (2.5 GiB more for an 8B model at 8,192 tokens). No copy when they are apart.
  // Per-head norm (qwen3): in F32 with an F32 weight, back to the projection's dtype so q, k and v agree.
  auto head_norm = [&](RMSNorm& norm, const at::Tensor& h) {
    return norm ? norm->forward(h.contiguous(), policy).to(h.scalar_type()) : h;
  };
  const at::Tensor q = head_norm(q_norm, qkv[0].view({b, t, num_heads, head_dim}));     // [B, T, H, D]
  const at::Tensor k = head_norm(k_norm, qkv[1].view({b, t, num_kv_heads, head_dim}));  // [B, T, Hkv, D]
  return {ops::rope(q, ctx.cos, ctx.sin, policy), ops::rope(k, ctx.cos, ctx.sin, policy),
          qkv[2].view({b, t, num_kv_heads, head_dim}).contiguous()};  // v [B, T, Hkv, D]
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const LayerContext& ctx, int64_t layer_index) {
  const auto [q, k, v] = project(x, ctx);
  const at::Tensor out = ops::attention(q, k, v, *ctx.mask, scores, *ctx.policy, ctx.cache, layer_index);
  return o_proj->forward(out, *ctx.policy);  // out [B, T, H * D]
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

at::Tensor MLPImpl::fp8_forward(const at::Tensor& x, const KernelPolicy& policy) {
  const std::vector<LinearImpl*> in = gate_up_proj ? std::vector<LinearImpl*>{gate_up_proj.get()}
                                                   : std::vector<LinearImpl*>{gate_proj.get(), up_proj.get()};
  const auto plain_tensorwise = [](const LinearImpl* l) {
    return l->fp8_training == Fp8Training::kTensorwise && !l->has_lora() && !l->quantized() && !l->bias.defined();
  };
  if (!plain_tensorwise(down_proj.get()) || !std::all_of(in.begin(), in.end(), plain_tensorwise)) return {};
  std::vector<at::Tensor> gate_up, amax;  // amax: F32 [] each, or undefined; gate/up's, then down's
  for (const LinearImpl* l : in) {
    gate_up.push_back(l->weight);
    amax.push_back(l->known_weight_amax());
  }
  amax.push_back(down_proj->known_weight_amax());
  if (!fp8_mlp_available(x, gate_up, down_proj->weight, policy)) return {};
  return fp8_training_mlp(x, gate_up, down_proj->weight, gelu_tanh, policy, amax);
}

at::Tensor MLPImpl::forward(const at::Tensor& x, const KernelPolicy& policy) {
  if (at::Tensor y = fp8_forward(x, policy); y.defined()) return y;
  if (gate_up_proj) {
    const at::Tensor gu = gate_up_proj->forward(x, policy);  // [B, T, 2 I], gate first
    const at::Tensor gate = gu.narrow(-1, 0, intermediate_size);                  // [B, T, I]
    const at::Tensor up = gu.narrow(-1, intermediate_size, intermediate_size);  // [B, T, I]
    const at::Tensor joint = gu.reshape({-1, 2 * intermediate_size});  // [N, 2 I]
    return down_proj->forward(ops::gated_activation(gate, up, joint, gelu_tanh, policy), policy);
  }
  const LinearGroupOutput gu = linear_group(x, {gate_proj.get(), up_proj.get()}, policy);
  const at::Tensor& gate = gu.outputs[0];  // [B, T, I]
  const at::Tensor& up = gu.outputs[1];    // [B, T, I]
  return down_proj->forward(ops::gated_activation(gate, up, gu.joint, gelu_tanh, policy), policy);
}

DecoderLayerImpl::DecoderLayerImpl(const ModelArgs& a, int64_t index_) : index(index_) {
  self_attn = register_module("self_attn", Attention(a));
  if (a.moe_layer(index)) {
    moe = register_module("mlp", SparseMoe(a));
  } else {
    mlp = register_module("mlp", MLP(a));
  }
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
                                                            const LayerContext& ctx) {
  const auto [h, normed] = input_norm(residual, pending, *ctx.policy);
  return forward_normed(h, normed, ctx);
}

std::pair<at::Tensor, at::Tensor> DecoderLayerImpl::input_norm(const at::Tensor& residual, const at::Tensor& pending,
                                                               const KernelPolicy& policy) {
  return input_layernorm->add_forward(residual, pending, /*gemm_input=*/true, policy);
}

std::pair<at::Tensor, at::Tensor> DecoderLayerImpl::forward_normed(const at::Tensor& h, const at::Tensor& normed,
                                                                   const LayerContext& ctx) {
  const KernelPolicy& policy = *ctx.policy;
  const at::Tensor attn = self_attn->forward(normed, ctx, index);  // [B, T, hidden]
  if (pre_feedforward_layernorm) {  // gemma: the normed outputs of attention and MLP join the stream
    const at::Tensor attn_normed = post_attention_layernorm->forward(attn, policy);  // [B, T, hidden]
    const auto [h2, normed2] = pre_feedforward_layernorm->add_forward(h, attn_normed, /*gemm_input=*/true, policy);
    return {h2, post_feedforward_layernorm->forward(mlp->forward(normed2, policy), policy)};
  }
  const auto [h2, normed2] = post_attention_layernorm->add_forward(h, attn, /*gemm_input=*/true, policy);
  return {h2, moe ? moe->forward(normed2, policy, ctx.router_logits) : mlp->forward(normed2, policy)};
}

}  // namespace ft::model

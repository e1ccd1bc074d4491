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

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias) {
  weight = register_parameter("weight", at::empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", at::zeros({out_features}));
}

namespace {

// The input of the adapter's GEMMs: under autocast the GEMM casts it to the compute dtype anyway, so `x` (or the copy
// already cast for the base GEMM) serves; elsewhere x in the adapter's dtype, as PEFT's lora_A(x.to(A.dtype)).
at::Tensor adapter_input(const at::Tensor& x, const LinearImpl& layer) {
  if (at::autocast::is_autocast_enabled(x.device().type())) return x;
  return x.to(layer.lora_a.scalar_type());
}

// y2d [N, out] += scaling * down [N, r] B^T, in place in the GEMM's epilogue: B [out, r] is scaled (cheap) instead
// of the product [N, out], and no separate add pass runs. y2d must not be a view: autograd turns an in-place op on a
// view into CopySlices, whose backward copies the whole output gradient three times.
void add_adapter_(at::Tensor& y2d, const at::Tensor& down, const at::Tensor& lora_b, double scaling) {
  const at::ScalarType dtype = y2d.scalar_type();
  y2d.addmm_(down.reshape({-1, down.size(-1)}).to(dtype), (lora_b * scaling).to(dtype).t());
}

// x [..., in] as [N, in] and a layer output [N, out] back as [..., out].
at::Tensor as_rows(const at::Tensor& x) {
  return x.reshape({-1, x.size(-1)});
}
at::Tensor from_rows(const at::Tensor& y2d, const at::Tensor& x) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = y2d.size(1);
  return y2d.view(shape);
}

// `parts` (weights [out_i, in] or biases [out_i]) as one tensor when they are frozen, contiguous, consecutive row
// blocks of one buffer (join_frozen_weights), else undefined.
at::Tensor joined_rows(const std::vector<at::Tensor>& parts) {
  const at::Tensor& first = parts.at(0);
  if (first.requires_grad() || !first.is_contiguous() || first.dim() < 1 || first.dim() > 2) return {};
  int64_t rows = first.size(0);
  const char* next = static_cast<const char*>(first.const_data_ptr()) + first.nbytes();
  for (size_t i = 1; i < parts.size(); ++i) {
    const at::Tensor& t = parts[i];
    if (t.requires_grad() || !t.is_contiguous() || t.scalar_type() != first.scalar_type() ||
        t.sizes().slice(1) != first.sizes().slice(1) || !t.storage().is_alias_of(first.storage()) ||
        static_cast<const char*>(t.const_data_ptr()) != next) {
      return {};
    }
    rows += t.size(0);
    next += t.nbytes();
  }
  if (first.dim() == 1) return first.as_strided({rows}, {1});
  return first.as_strided({rows, first.size(1)}, {first.size(1), 1});
}

}  // namespace

void LinearImpl::replace_frozen(at::Tensor new_weight, at::Tensor new_bias) {
  weight = new_weight;
  parameters_["weight"] = std::move(new_weight);
  if (bias.defined()) {
    bias = new_bias;
    parameters_["bias"] = std::move(new_bias);
  }
}

bool join_frozen_weights(const std::vector<LinearImpl*>& layers) {
  if (layers.size() < 2) return false;
  const at::Tensor& w0 = layers[0]->weight;
  const bool with_bias = layers[0]->bias.defined();
  for (const LinearImpl* l : layers) {
    const at::Tensor& w = l->weight;
    if (w.requires_grad() || !w.is_contiguous() || w.dim() != 2 || w.scalar_type() != w0.scalar_type() ||
        w.device() != w0.device() || w.size(1) != w0.size(1) || l->bias.defined() != with_bias) {
      return false;
    }
    if (with_bias && (l->bias.requires_grad() || l->bias.scalar_type() != layers[0]->bias.scalar_type() ||
                      l->bias.device() != w0.device())) {
      return false;
    }
  }
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> weights, biases;
  for (const LinearImpl* l : layers) {
    weights.push_back(l->weight);
    if (with_bias) biases.push_back(l->bias);
  }
  const at::Tensor joint_weight = at::cat(weights);  // [sum out_i, in]
  const at::Tensor joint_bias = with_bias ? at::cat(biases) : at::Tensor();  // [sum out_i] or undefined
  int64_t row = 0;
  for (LinearImpl* l : layers) {
    const int64_t n = l->weight.size(0);
    l->replace_frozen(joint_weight.narrow(0, row, n), with_bias ? joint_bias.narrow(0, row, n) : at::Tensor());
    row += n;
  }
  return true;
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  if (!has_lora()) return at::linear(x, weight, bias);  // [..., out]
  at::Tensor y = at::linear(as_rows(x), weight, bias);  // [N, out]
  at::Tensor h = adapter_input(x, *this);
  if (lora_dropout > 0.0 && is_training()) h = at::dropout(h, lora_dropout, true);
  add_adapter_(y, at::linear(h, lora_a), lora_b, lora_scaling);
  return from_rows(y, x);
}

void LinearImpl::add_lora(int64_t rank, double alpha, double dropout, at::Generator& gen) {
  FT_CHECK(!has_lora(), "add_lora: layer already has an adapter");
  const int64_t in = weight.size(1);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming_uniform_(a=sqrt(5)), as PEFT
  at::Tensor a = at::empty({rank, in}, at::kFloat).uniform_(-bound, bound, gen);
  lora_a = register_parameter("lora_A", a.to(weight.device()));
  lora_b = register_parameter("lora_B", at::zeros({weight.size(0), rank}, at::TensorOptions().device(weight.device())));
  lora_scaling = alpha / static_cast<double>(rank);
  lora_dropout = dropout;
}

void LinearImpl::merge_lora() {
  if (!has_lora()) return;
  {
    at::NoGradGuard no_grad;
    at::Tensor delta = at::matmul(lora_b.to(at::kFloat), lora_a.to(at::kFloat)) * lora_scaling;
    weight.copy_((weight.to(at::kFloat) + delta).to(weight.scalar_type()));
  }
  parameters_.erase("lora_A");
  parameters_.erase("lora_B");
  lora_a = at::Tensor();
  lora_b = at::Tensor();
}

LinearGroupOutput linear_group(const at::Tensor& x, const std::vector<LinearImpl*>& layers, bool fused) {
  const auto separate = [&] {
    LinearGroupOutput out;
    for (LinearImpl* layer : layers) out.outputs.push_back(layer->forward(x));
    return out;
  };
  if (!fused || layers.size() < 2) return separate();
  const at::ScalarType weight_dtype = layers[0]->weight.scalar_type();
  const bool with_bias = layers[0]->bias.defined();
  for (const LinearImpl* layer : layers) {
    if (layer->weight.scalar_type() != weight_dtype || layer->bias.defined() != with_bias) return separate();
  }
  const auto device_type = x.device().type();
  const bool autocast = at::autocast::is_autocast_enabled(device_type);
  const at::ScalarType dtype = autocast ? at::autocast::get_autocast_dtype(device_type) : weight_dtype;
  const at::Tensor xin = as_rows(x.to(dtype));  // [N, in]: cast once instead of once per layer
  std::vector<int64_t> sizes;
  for (const LinearImpl* layer : layers) sizes.push_back(layer->weight.size(0));
  std::vector<at::Tensor> out;  // per layer: [N, out_i], then [..., out_i]
  at::Tensor fused_out;         // [N, sum out_i] when one GEMM computes them all
  if (weight_dtype != dtype) {
    // Weights cast to the compute dtype (as autocast would, layer by layer) and concatenated: one GEMM.
    std::vector<at::Tensor> weights, biases;
    for (const LinearImpl* layer : layers) {
      weights.push_back(layer->weight.to(dtype));
      if (with_bias) biases.push_back(layer->bias.to(dtype));
    }
    fused_out = at::linear(xin, at::cat(weights), with_bias ? at::cat(biases) : at::Tensor());
  } else {
    std::vector<at::Tensor> weights, biases;
    for (const LinearImpl* layer : layers) {
      weights.push_back(layer->weight);
      if (with_bias) biases.push_back(layer->bias);
    }
    const at::Tensor joint = joined_rows(weights);
    const at::Tensor joint_bias = with_bias ? joined_rows(biases) : at::Tensor();
    if (joint.defined() && joint_bias.defined() == with_bias) {
      fused_out = at::linear(xin, joint, joint_bias);  // a frozen base joined at setup (join_frozen_weights)
    } else {
      // Weights already in the compute dtype and apart: concatenating them would copy every weight each step, so
      // only the input is shared.
      for (const LinearImpl* layer : layers) out.push_back(at::linear(xin, layer->weight, layer->bias));
    }
  }
  // Adapters: with dropout each layer draws its own mask (as PEFT), so their A GEMMs stay apart.
  std::vector<size_t> adapted;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i]->has_lora()) adapted.push_back(i);
  }
  if (!adapted.empty()) {
    const bool train_dropout = [&] {
      for (size_t i : adapted) {
        if (layers[i]->lora_dropout > 0.0 && layers[i]->is_training()) return true;
      }
      return false;
    }();
    const at::Tensor h = autocast ? xin : adapter_input(x, *layers[adapted[0]]);
    std::vector<at::Tensor> down;  // per adapted layer: [N, r_i]
    if (train_dropout) {
      for (size_t i : adapted) {
        const LinearImpl& l = *layers[i];
        down.push_back(at::linear(l.lora_dropout > 0.0 ? at::dropout(h, l.lora_dropout, true) : h, l.lora_a));
      }
    } else {
      std::vector<at::Tensor> a;
      std::vector<int64_t> ranks;
      for (size_t i : adapted) {
        a.push_back(layers[i]->lora_a);
        ranks.push_back(layers[i]->lora_a.size(0));
      }
      down = at::linear(h, at::cat(a)).split_with_sizes(ranks, -1);
    }
    if (fused_out.defined()) {
      // One GEMM adds every adapter into the joint output (a column block of it would be a view): the scaled B
      // matrices form a block-diagonal [sum out_i, sum r_i], an empty block for a layer without an adapter.
      std::vector<at::Tensor> blocks;
      size_t next = 0;
      for (size_t i = 0; i < layers.size(); ++i) {
        const LinearImpl& l = *layers[i];
        const bool has = next < adapted.size() && adapted[next] == i;
        const auto b_options = layers[adapted[0]]->lora_b.options();
        blocks.push_back(has ? l.lora_b * l.lora_scaling : at::zeros({sizes[i], 0}, b_options));
        next += has ? 1 : 0;
      }
      add_adapter_(fused_out, at::cat(down, -1), at::block_diag(blocks), 1.0);
    } else {
      for (size_t j = 0; j < adapted.size(); ++j) {
        const LinearImpl& l = *layers[adapted[j]];
        add_adapter_(out[adapted[j]], down[j], l.lora_b, l.lora_scaling);
      }
    }
  }
  if (fused_out.defined()) out = fused_out.split_with_sizes(sizes, 1);
  for (at::Tensor& y : out) y = from_rows(y, x);
  return {out, fused_out};
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
    const at::Tensor y = qkv_proj->forward(x);  // [B, T, (H + 2 Hkv) D]
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
    return o_proj->forward(out.view({b, t, num_heads * head_dim}));
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
  return o_proj->forward(out);
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
    const at::Tensor gu = gate_up_proj->forward(x);  // [B, T, 2 I], gate first
    const at::Tensor gate = gu.narrow(-1, 0, intermediate_size), up = gu.narrow(-1, intermediate_size, intermediate_size);
    if (fused && fused_swiglu_available(gate, up)) {
      return down_proj->forward(fused_swiglu_joint(gu.reshape({-1, 2 * intermediate_size})).view(gate.sizes()));
    }
    return down_proj->forward(at::silu(gate) * up);
  }
  const LinearGroupOutput gu = linear_group(x, {gate_proj.get(), up_proj.get()}, fused);
  const at::Tensor& gate = gu.outputs[0];  // [B, T, I]
  const at::Tensor& up = gu.outputs[1];    // [B, T, I]
  if (!fused || !fused_swiglu_available(gate, up)) {
    return down_proj->forward((gelu_tanh ? at::gelu(gate, "tanh") : at::silu(gate)) * up);
  }
  if (gu.joint.defined()) return down_proj->forward(fused_swiglu_joint(gu.joint, gelu_tanh).view(gate.sizes()));
  return down_proj->forward(fused_swiglu(gate, up, gelu_tanh));
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

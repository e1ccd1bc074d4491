#include "model/transformer.h"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

#include "model/mode_guards.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::model {

void WeightHolder::add_token_rows(std::vector<int64_t> ids) {
  FT_CHECK(!has_token_rows(), "add_token_rows: the module already has token rows");
  std::sort(ids.begin(), ids.end());
  FT_CHECK(!ids.empty() && std::adjacent_find(ids.begin(), ids.end()) == ids.end(),
           "add_token_rows: the token ids must be distinct and not empty");
  FT_CHECK(ids.front() >= 0 && ids.back() < weight.size(0),
           fmt::format("add_token_rows: token id {} outside the {} rows", ids.back(), weight.size(0)));
  token_ids_ = std::move(ids);
  at::NoGradGuard no_grad;
  token_rows = register_parameter("token_rows", weight.index_select(0, index_on_device()).to(at::kFloat).clone());
}

const at::Tensor& WeightHolder::index_on_device() const {
  if (!index_.defined() || index_.device() != weight.device()) {
    index_ = at::tensor(token_ids_, at::kLong).to(weight.device());
  }
  return index_;
}

at::Tensor WeightHolder::effective_weight() const {
  if (!has_token_rows()) return weight;
  return weight.index_copy(0, index_on_device(), token_rows.to(weight.scalar_type()));
}

at::Tensor WeightHolder::embed(const at::Tensor& ids) const {
  at::Tensor h = at::embedding(weight, ids);  // [.., cols]
  if (!has_token_rows()) return h;
  // The position of each id in the sorted index; a hit where the id is there.
  const at::Tensor& index = index_on_device();
  const at::Tensor pos = at::searchsorted(index, ids).clamp_max(index.size(0) - 1);
  const at::Tensor hit = index.index_select(0, pos.reshape({-1})).view(ids.sizes()).eq(ids);
  const at::Tensor rows = at::embedding(token_rows.to(weight.scalar_type()), pos);
  return at::where(hit.unsqueeze(-1), rows, h);
}

void WeightHolder::merge_token_rows() {
  if (!has_token_rows()) return;
  {
    at::NoGradGuard no_grad;
    weight.index_copy_(0, index_on_device(), token_rows.to(weight.scalar_type()));
  }
  parameters_.erase("token_rows");
  token_rows = at::Tensor();
  token_ids_.clear();
  index_ = at::Tensor();
}

Backbone::Backbone(const ModelArgs& a) {
  embed_tokens = register_module("embed_tokens", std::make_shared<WeightHolder>(a.vocab_size, a.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < a.num_layers; ++i) layers->push_back(DecoderLayer(a, i));
  norm = register_module("norm", RMSNorm(a.hidden_size, a.rms_norm_eps, a.gemma));
}

namespace {

// The rope of gemma3_text's sliding layers: the default rope at local_rope_theta.
ModelArgs local_rope_args(const ModelArgs& a) {
  ModelArgs local = a;
  local.rope_theta = *a.local_rope_theta;
  local.rope_scaling = RopeScaling{};
  return local;
}

}  // namespace

Transformer::Transformer(const ModelArgs& a) : args_(a), rotary_(a) {
  FT_CHECK(a.vocab_size > 0 && a.hidden_size > 0 && a.num_layers > 0 && a.head_dim > 0,
           "Transformer: vocab_size, hidden_size, num_layers and head_dim must be positive");
  if (a.local_rope_theta) local_rotary_.emplace(local_rope_args(a));
  model_ = register_module("model", std::make_shared<Backbone>(a));
  if (!a.tie_word_embeddings) {
    lm_head_ = register_module("lm_head", std::make_shared<WeightHolder>(a.vocab_size, a.hidden_size));
  }
}

DecoderLayer Transformer::layer(int64_t i) const {
  return DecoderLayer(model_->layers->ptr<DecoderLayerImpl>(static_cast<size_t>(i)));
}

at::Tensor Transformer::lm_head_weight() const {
  return lm_head_ ? lm_head_->effective_weight() : model_->embed_tokens->effective_weight();
}

void Transformer::resize_token_embeddings(int64_t vocab_size, const std::vector<int64_t>& mean_rows) {
  const int64_t old = args_.vocab_size;
  FT_CHECK(vocab_size >= old,
           fmt::format("resize_token_embeddings: {} rows would shrink the vocabulary of {}", vocab_size, old));
  for (int64_t id : mean_rows) {
    FT_CHECK(id >= 0 && id < vocab_size,
             fmt::format("resize_token_embeddings: row {} outside [0, {})", id, vocab_size));
  }
  auto grow = [&](WeightHolder& holder) {
    FT_CHECK(!holder.has_token_rows(), "resize_token_embeddings: merge or drop the token rows first");
    at::NoGradGuard no_grad;
    const at::Tensor& w = holder.weight;                                   // [old, hidden]
    const at::Tensor mean = w.to(at::kFloat).mean(0).to(w.scalar_type());  // [hidden]
    if (vocab_size > old) {
      at::Tensor grown = at::empty({vocab_size, w.size(1)}, w.options());
      grown.narrow(0, 0, old).copy_(w);
      grown.narrow(0, old, vocab_size - old).copy_(mean.expand({vocab_size - old, w.size(1)}));
      holder.weight.set_data(grown);  // the same parameter, now [vocab_size, hidden]
    }
    for (int64_t id : mean_rows) holder.weight[id].copy_(mean);
  };
  grow(*model_->embed_tokens);
  if (lm_head_) grow(*lm_head_);
  args_.vocab_size = vocab_size;
}

void Transformer::add_token_rows(const std::vector<int64_t>& ids) {
  model_->embed_tokens->add_token_rows(ids);
  if (lm_head_) lm_head_->add_token_rows(ids);
}

void Transformer::merge_token_rows() {
  model_->embed_tokens->merge_token_rows();
  if (lm_head_) lm_head_->merge_token_rows();
}

void Transformer::set_fused_kernels(bool on) {
  fused_ = on;
  for (const auto& module : modules()) {
    if (auto* norm = module->as<RMSNormImpl>()) norm->fused = on;
    if (auto* attention = module->as<AttentionImpl>()) {
      attention->fused_rope = on;
      attention->fused_linears = on;
      attention->fused_softcap = on;
    }
    if (auto* mlp = module->as<MLPImpl>()) mlp->fused_linears = on;
  }
}

bool Transformer::varlen_ok(at::Device device, at::ScalarType compute_dtype) const {
  // FlashAttention-2's limits: half precision, head_dim a multiple of 8 up to 256, no logit soft-capping.
  return fused_ && device.is_cuda() && (compute_dtype == at::kBFloat16 || compute_dtype == at::kHalf) &&
         args_.head_dim % 8 == 0 && args_.head_dim <= 256 && !args_.attn_logit_softcapping;
}

std::string Transformer::attention_path(bool packed, at::Device device, at::ScalarType compute_dtype) const {
  std::string path;
  if (args_.attn_logit_softcapping) {
    path = fused_ && device.is_cuda() ? "soft-capped attention kernel (logit soft-capping, which SDPA and flash "
                                        "attention lack)"
                                      : "eager (logit soft-capping, which SDPA and flash attention lack)";
    if (packed) path += " with a block-diagonal mask (packed rows)";
  } else if (packed && varlen_ok(device, compute_dtype)) {
    path = "varlen flash attention over packed pieces";
  } else if (packed) {
    path = "SDPA with a block-diagonal mask (packed rows)";
  } else {
    path = "SDPA (causal)";
  }
  if (args_.sliding_window) {
    path += "; sliding window of " + std::to_string(*args_.sliding_window) +
            (args_.sliding_layers.empty() ? "" : " on the sliding layers") +
            (varlen_ok(device, compute_dtype) ? " through varlen flash attention" : " as a dense mask");
  }
  return path;
}

AttentionMask Transformer::build_mask(const at::Tensor& segment_ids, int64_t b, int64_t t, int64_t past, bool cached,
                                      at::Device device, const PackedPieces* packed, at::ScalarType compute_dtype,
                                      std::optional<int64_t> window) const {
  const int64_t s = past + t;
  const bool windowed = window.has_value() && s > *window;
  AttentionMask out;
  if (segment_ids.defined() && packed != nullptr && packed->cu_seqlens.defined() && past == 0 &&
      varlen_ok(device, compute_dtype)) {
    out.cu_seqlens = packed->cu_seqlens;
    out.max_seqlen = packed->max_seqlen;
    out.window = windowed ? *window : 0;
    out.causal = false;
    return out;
  }
  if (!segment_ids.defined() && windowed && !cached && varlen_ok(device, compute_dtype)) {
    // Unpacked rows under a window: flash attention has the window and SDPA only a dense mask, so each row becomes
    // one piece of a varlen call.
    out.cu_seqlens = at::arange(0, (b + 1) * t, t, at::TensorOptions().dtype(at::kInt).device(device));
    out.max_seqlen = t;
    out.window = *window;
    out.causal = false;
    return out;
  }
  if (!segment_ids.defined() && !windowed) {
    if (past == 0) return out;  // plain causal: SDPA's is_causal
    if (t == 1) {               // one new token sees every cached key
      out.causal = false;
      return out;
    }
  }
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor q_pos = at::arange(past, s, opts).unsqueeze(1);  // [T, 1]
  at::Tensor k_pos = at::arange(0, s, opts).unsqueeze(0);     // [1, S]
  at::Tensor m = k_pos <= q_pos;                              // [T, S]
  if (windowed) m = m.logical_and(q_pos - k_pos < *window);
  m = m.unsqueeze(0);  // [1, T, S]
  if (segment_ids.defined()) {
    at::Tensor seg = segment_ids.to(device);
    m = m.logical_and(seg.unsqueeze(2) == seg.unsqueeze(1));  // [B, T, T]
  }
  out.mask = m.unsqueeze(1);  // [B or 1, 1, T, S]
  out.causal = false;
  return out;
}

at::Tensor Transformer::hidden_states(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                      const at::Tensor& segment_ids, KVCache* cache, const PackedPieces* packed) {
  FT_CHECK(input_ids.dim() == 2, "Transformer::forward: input_ids must be [B, T]");
  const int64_t b = input_ids.size(0), t = input_ids.size(1);
  const int64_t past = cache != nullptr ? cache->length : 0;
  if (segment_ids.defined()) {
    FT_CHECK(past == 0, "Transformer::forward: segment_ids (packing) cannot be combined with a non-empty KV cache");
    FT_CHECK(segment_ids.sizes() == input_ids.sizes(),
             "Transformer::forward: segment_ids must be [B, T] like input_ids");
  }
  at::Tensor positions = position_ids;
  if (!positions.defined()) {
    positions = at::arange(past, past + t, at::TensorOptions().dtype(at::kLong).device(input_ids.device()))
                    .unsqueeze(0)
                    .expand({b, t});
  }
  const auto dev = input_ids.device();
  const auto compute_dtype = at::autocast::is_autocast_enabled(dev.type())
                                 ? at::autocast::get_autocast_dtype(dev.type())
                                 : model_->embed_tokens->weight.scalar_type();
  // The rotary tables (F32 with autocast off, as transformers computes them), then in the dtype q and k will have
  // (what apply_rotary would cast them to in every layer). Index 1: gemma3_text's sliding layers.
  std::array<at::Tensor, 2> cos, sin;
  {
    const auto no_autocast = AutocastGuard::off(dev.type());
    std::tie(cos[0], sin[0]) = rotary_.cos_sin(positions);
    if (local_rotary_) std::tie(cos[1], sin[1]) = local_rotary_->cos_sin(positions);
  }
  for (size_t r = 0; r < 2 && cos[r].defined(); ++r) {
    cos[r] = cos[r].to(compute_dtype);
    sin[r] = sin[r].to(compute_dtype);
  }
  // Index 0: full attention; 1: the layers with a sliding window (built only when some layer has one).
  bool any_full = false, any_sliding = false;
  for (int64_t i = 0; i < args_.num_layers; ++i) (args_.layer_slides(i) ? any_sliding : any_full) = true;
  std::array<AttentionMask, 2> masks;
  const bool cached = cache != nullptr;
  if (any_full) masks[0] = build_mask(segment_ids, b, t, past, cached, dev, packed, compute_dtype, std::nullopt);
  if (any_sliding) {
    masks[1] = build_mask(segment_ids, b, t, past, cached, dev, packed, compute_dtype, args_.sliding_window);
  }
  // The hidden state is residual + pending: each layer leaves its MLP output pending for the next norm to add.
  at::Tensor residual = model_->embed_tokens->embed(input_ids);  // [B, T, hidden]
  if (args_.gemma) {  // sqrt(hidden), rounded to the embedding's dtype first (as transformers' buffer)
    const double scale = std::sqrt(static_cast<double>(args_.hidden_size));
    residual = residual * at::scalar_tensor(scale, at::kFloat).to(residual.scalar_type());
  }
  at::Tensor pending;  // [B, T, hidden] or undefined (before layer 0)
  const bool recompute = checkpointing_ && cache == nullptr && at::GradMode::is_enabled();
  for (size_t i = 0; i < model_->layers->size(); ++i) {
    auto& layer = *model_->layers->ptr<DecoderLayerImpl>(i);
    const size_t slides = args_.layer_slides(static_cast<int64_t>(i)) ? 1 : 0;
    const size_t rope = slides == 1 && local_rotary_ ? 1 : 0;
    const AttentionMask& mask = masks[slides];
    std::tie(residual, pending) = recompute ? checkpointed_layer(layer, residual, pending, cos[rope], sin[rope], mask)
                                            : layer.forward(residual, pending, cos[rope], sin[rope], mask, cache);
  }
  if (cache != nullptr) cache->length += t;
  // The final norm feeds the LM head or the caller: it keeps forward's dtype (F32 with F32 weights under autocast).
  return model_->norm->add_forward(residual, pending, /*gemm_input=*/false).second;
}

at::Tensor Transformer::forward(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                const at::Tensor& segment_ids, KVCache* cache, const PackedPieces* packed) {
  at::Tensor logits = at::linear(hidden_states(input_ids, position_ids, segment_ids, cache, packed), lm_head_weight());
  if (const auto cap = args_.final_logit_softcapping) logits = at::tanh(logits / *cap) * *cap;
  return logits;
}

}  // namespace ft::model

#include "model/transformer.h"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <tuple>

#include "model/activation_offload.h"
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

std::vector<std::pair<std::string, Linear>> Transformer::projections() const {
  std::vector<std::pair<std::string, Linear>> out;
  for (int64_t i = 0; i < args_.num_layers; ++i) {
    DecoderLayer decoder = layer(i);
    const std::string base = "model.layers." + std::to_string(i) + ".";
    auto& attn = *decoder->self_attn;
    const MLP& mlp = decoder->mlp;  // null in an MoE layer (its experts are 3-D weights, not projections)
    for (const auto& [name, lin] : {std::pair<const char*, Linear>{"self_attn.q_proj", attn.q_proj},
                                    {"self_attn.k_proj", attn.k_proj},
                                    {"self_attn.v_proj", attn.v_proj},
                                    {"self_attn.qkv_proj", attn.qkv_proj},
                                    {"self_attn.o_proj", attn.o_proj},
                                    {"mlp.gate_proj", mlp ? mlp->gate_proj : Linear{nullptr}},
                                    {"mlp.up_proj", mlp ? mlp->up_proj : Linear{nullptr}},
                                    {"mlp.gate_up_proj", mlp ? mlp->gate_up_proj : Linear{nullptr}},
                                    {"mlp.down_proj", mlp ? mlp->down_proj : Linear{nullptr}}}) {
      if (lin) out.emplace_back(base + name, lin);
    }
  }
  return out;
}

std::vector<std::pair<std::string, MoeExperts>> Transformer::moe_experts() const {
  std::vector<std::pair<std::string, MoeExperts>> out;
  for (int64_t i = 0; i < args_.num_layers; ++i) {
    DecoderLayer decoder = layer(i);
    if (decoder->moe) out.emplace_back("model.layers." + std::to_string(i) + ".mlp.experts", decoder->moe->experts);
  }
  return out;
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

std::string Transformer::kernel_summary(bool packed) const {
  std::string loss_and_ops = policy_.fused ? "chunked linear + cross-entropy, fused RMSNorm and RoPE"
                                           : "full logits + cross-entropy, composite RMSNorm and RoPE";
  if (!policy_.kernels) loss_and_ops += " (our CUDA kernels off: " + policy_.why_not + ")";
  // MoE: ops::grouped_gemm's choice (at::_grouped_mm also needs 16-byte aligned rows, which real models have).
  const bool grouped = policy_.group_gemms && (!policy_.device.is_cuda() || policy_.compute_dtype == at::kBFloat16);
  const std::string experts = args_.num_experts <= 0 ? ""
                              : grouped              ? "; experts as grouped GEMMs (at::_grouped_mm)"
                                                     : "; experts as one GEMM per expert";
  return "attention " + AttentionPlan::describe(args_, policy_, packed) + "; " + loss_and_ops +
         (args_.final_logit_softcapping ? "; final logit soft-capping" : "") + experts;
}

std::array<std::pair<at::Tensor, at::Tensor>, 2> Transformer::rotary_tables(const at::Tensor& positions,
                                                                            at::ScalarType compute_dtype) const {
  // The rotary tables (F32 with autocast off, as transformers computes them), then in the dtype q and k will have
  // (what apply_rotary would cast them to in every layer).
  std::array<std::pair<at::Tensor, at::Tensor>, 2> tables;  // [B, T, R] each
  {
    const auto no_autocast = AutocastGuard::off(positions.device().type());
    tables[0] = rotary_.cos_sin(positions);
    if (local_rotary_) tables[1] = local_rotary_->cos_sin(positions);
  }
  for (auto& [cos, sin] : tables) {
    if (!cos.defined()) continue;
    cos = cos.to(compute_dtype);
    sin = sin.to(compute_dtype);
  }
  return tables;
}

std::pair<at::Tensor, at::Tensor> Transformer::run_layers(
    at::Tensor residual, const AttentionPlan& plan, const std::array<std::pair<at::Tensor, at::Tensor>, 2>& rope,
    KVCache* cache) {
  at::Tensor pending;  // [B, T, hidden] or undefined (before layer 0)
  const bool recompute = checkpointing_ && cache == nullptr && at::GradMode::is_enabled();
  std::optional<OffloadChain> offload;  // one side stream per forward
  if (recompute && offload_) offload = OffloadChain::on(residual.device());
  for (size_t i = 0; i < model_->layers->size(); ++i) {
    auto& layer = *model_->layers->ptr<DecoderLayerImpl>(i);
    const bool slides = args_.layer_slides(static_cast<int64_t>(i));
    const auto& [cos, sin] = rope[slides && local_rotary_ ? 1 : 0];
    LayerContext ctx{cos, sin, &plan.for_layer(args_, static_cast<int64_t>(i)), cache, &policy_};
    ctx.router_logits = collect_router_logits_ ? &router_logits_ : nullptr;
    ctx.offload = offload ? &*offload : nullptr;
    std::tie(residual, pending) =
        recompute ? checkpointed_layer(layer, residual, pending, ctx) : layer.forward(residual, pending, ctx);
  }
  return {residual, pending};
}

at::Tensor Transformer::hidden_states(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                      const at::Tensor& segment_ids, KVCache* cache, const PackedPieces* packed) {
  FT_CHECK(input_ids.dim() == 2, "Transformer::forward: input_ids must be [B, T]");
  AttentionBatch batch;
  batch.segment_ids = segment_ids;
  batch.packed = packed;
  batch.rows = input_ids.size(0);
  batch.length = input_ids.size(1);
  batch.past = cache != nullptr ? cache->length : 0;
  batch.cached = cache != nullptr;
  if (cache != nullptr) batch.first_real = cache->first_real;
  batch.device = input_ids.device();
  if (segment_ids.defined()) {
    FT_CHECK(batch.past == 0,
             "Transformer::forward: segment_ids (packing) cannot be combined with a non-empty KV cache");
    FT_CHECK(segment_ids.sizes() == input_ids.sizes(),
             "Transformer::forward: segment_ids must be [B, T] like input_ids");
  }
  at::Tensor positions = position_ids;  // I64 [B, T]
  if (!positions.defined()) {
    positions = at::arange(batch.past, batch.past + batch.length,
                           at::TensorOptions().dtype(at::kLong).device(batch.device))
                    .unsqueeze(0)
                    .expand({batch.rows, batch.length});
  }
  const auto device_type = batch.device.type();
  batch.compute_dtype = at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type)
                                                                       : model_->embed_tokens->weight.scalar_type();
  const AttentionPlan plan = AttentionPlan::build(args_, policy_, batch);
  // The hidden state is residual + pending: each layer leaves its MLP output pending for the next norm to add.
  at::Tensor residual = model_->embed_tokens->embed(input_ids);  // [B, T, hidden]
  if (args_.gemma) {  // sqrt(hidden), rounded to the embedding's dtype first (as transformers' buffer)
    const double scale = std::sqrt(static_cast<double>(args_.hidden_size));
    residual = residual * at::scalar_tensor(scale, at::kFloat).to(residual.scalar_type());
  }
  at::Tensor pending;  // [B, T, hidden] or undefined
  std::tie(residual, pending) = run_layers(residual, plan, rotary_tables(positions, batch.compute_dtype), cache);
  if (cache != nullptr) cache->length += batch.length;
  // The final norm feeds the LM head or the caller: it keeps forward's dtype (F32 with F32 weights under autocast).
  return model_->norm->add_forward(residual, pending, /*gemm_input=*/false, policy_).second;
}

at::Tensor Transformer::forward(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                const at::Tensor& segment_ids, KVCache* cache, const PackedPieces* packed) {
  return logits_of(hidden_states(input_ids, position_ids, segment_ids, cache, packed));  // [B, T, V]
}

at::Tensor Transformer::last_logits(const at::Tensor& input_ids, const at::Tensor& position_ids, KVCache* cache) {
  return logits_of(hidden_states(input_ids, position_ids, {}, cache).select(1, -1));  // [B, V]
}

at::Tensor Transformer::logits_of(const at::Tensor& hidden) const {
  at::Tensor logits = ops::linear(hidden, LinearWeight::dense(lm_head_weight(), {}), policy_);  // [..., V]
  if (const auto cap = args_.final_logit_softcapping) logits = at::tanh(logits / *cap) * *cap;
  return logits;
}

}  // namespace ft::model

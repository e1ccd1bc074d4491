// The decoder-only transformer of the LLaMA family (llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, and the
// mixtures of experts qwen3_moe and mixtral, model/moe.h),
// parameter names exactly as transformers' *ForCausalLM: model.embed_tokens.weight,
// model.layers.N.self_attn.q_proj.weight (phi3: qkv_proj, mlp.gate_up_proj), ..., model.norm.weight, lm_head.weight
// (absent when the embeddings are tied).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/args.h"
#include "model/attention.h"
#include "model/kernel_policy.h"
#include "model/layers.h"

namespace ft::model {

// A module holding one parameter named "weight" (embed_tokens, lm_head). Under LoRA with tokenizer.add_tokens it
// also holds trainable copies of some rows (PEFT's trainable_token_indices): "token_rows" replace the rows
// `token_index` of the frozen weight in every forward, so only they are trained.
class WeightHolder : public torch::nn::Module {
 public:
  WeightHolder(int64_t rows, int64_t cols) { weight = register_parameter("weight", at::empty({rows, cols})); }

  // Adds token_rows (F32, trainable) for `ids` (distinct, within the weight), initialised from the weight's rows.
  void add_token_rows(std::vector<int64_t> ids);
  bool has_token_rows() const { return token_rows.defined(); }
  const std::vector<int64_t>& token_ids() const { return token_ids_; }  // sorted; empty without token rows
  // The weight with the token rows written in (differentiable in token_rows, as PEFT's index_copy), else weight.
  at::Tensor effective_weight() const;
  // at::embedding(effective_weight(), ids) without building that matrix: ids [..] -> [.., cols].
  at::Tensor embed(const at::Tensor& ids) const;
  // Writes the token rows into weight (in its dtype) and removes them.
  void merge_token_rows();

  at::Tensor weight;      // [rows, cols]
  at::Tensor token_rows;  // F32 [n, cols] or undefined (parameter "token_rows")

 private:
  const at::Tensor& index_on_device() const;  // token_ids_ as I64 [n] on the weight's device (copied once)

  std::vector<int64_t> token_ids_;  // sorted
  mutable at::Tensor index_;        // not a buffer: Module::to(dtype) would cast it
};

// transformers' LlamaModel: the part under the "model." prefix.
class Backbone : public torch::nn::Module {
 public:
  explicit Backbone(const ModelArgs& args);
  std::shared_ptr<WeightHolder> embed_tokens;  // weight [V, hidden]
  torch::nn::ModuleList layers;                // DecoderLayer x num_layers
  RMSNorm norm{nullptr};
};

class Transformer : public torch::nn::Module {
 public:
  explicit Transformer(const ModelArgs& args);

  // input_ids I64 [B, T]; position_ids I64 [B, T] (undefined = cache offset + 0..T-1); segment_ids I32 [B, T] or
  // undefined (packing: a token attends only to earlier tokens of the same segment); `packed`, when given with
  // segment_ids, the same pieces as varlen offsets (data::Batch's cu_seqlens / max_seqlen) for the fused path.
  // Returns logits [B, T, V] in the compute dtype (F32 params: F32; BF16 params or autocast: BF16).
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& position_ids = {},
                     const at::Tensor& segment_ids = {}, KVCache* cache = nullptr, const PackedPieces* packed = nullptr);
  // The logits of each row's last position only, [B, V]: forward(...).select(1, -1) without the LM head over the
  // other positions (generation's prefill, as transformers' logits_to_keep=1).
  at::Tensor last_logits(const at::Tensor& input_ids, const at::Tensor& position_ids = {}, KVCache* cache = nullptr);
  // Final hidden states [B, T, hidden] (before lm_head), same arguments as forward.
  at::Tensor hidden_states(const at::Tensor& input_ids, const at::Tensor& position_ids = {},
                           const at::Tensor& segment_ids = {}, KVCache* cache = nullptr,
                           const PackedPieces* packed = nullptr);
  at::Tensor lm_head_weight() const;  // [V, hidden]: lm_head.weight, or the embeddings when tied (token rows in)

  // tokenizer.add_tokens: grows the embedding and the LM head (one matrix when tied, so they stay tied) to
  // `vocab_size` rows, as transformers' resize_token_embeddings with mean resizing: the new rows, and the rows
  // `mean_rows` (new tokens whose ids fall inside the old matrix, e.g. a vocabulary padded past the tokenizer), get
  // the mean of the old rows (in F32, per matrix). args().vocab_size follows. The parameters keep their identity
  // (resized in place), but call this before an optimizer holds them. Not with token rows.
  void resize_token_embeddings(int64_t vocab_size, const std::vector<int64_t>& mean_rows = {});
  // Under LoRA: the rows `ids` of the embedding and, when untied, of the LM head become trainable token rows
  // (their own F32 parameters model.embed_tokens.token_rows and lm_head.token_rows).
  void add_token_rows(const std::vector<int64_t>& ids);
  void merge_token_rows();  // writes the token rows into the weights and removes them
  WeightHolder& embed_tokens() { return *model_->embed_tokens; }
  const WeightHolder& embed_tokens() const { return *model_->embed_tokens; }
  WeightHolder* lm_head() const { return lm_head_.get(); }  // nullptr when tied

  // Recompute each decoder layer in backward instead of keeping its activations (only while grad mode is on and
  // no KV cache is used).
  void set_activation_checkpointing(bool on) { checkpointing_ = on; }
  // With checkpointing: the layer inputs it keeps wait for backward in pinned host memory (model/activation_offload.h).
  void set_activation_offload(bool on) { offload_ = on; }
  // The kernels of every forward (model/kernel_policy.h; default: the composite ATen ops). The Trainer sets the
  // policy of its run once; each op falls back by itself where its kernel cannot take the tensors.
  void set_kernel_policy(const KernelPolicy& policy) { policy_ = policy; }
  const KernelPolicy& kernel_policy() const { return policy_; }
  // The kernels a training forward takes under the policy (packed rows or not), for the log line "kernels: ...":
  // the attention path (AttentionPlan::describe), the loss, and the fused ops, or why they are composite.
  std::string kernel_summary(bool packed) const;
  bool activation_checkpointing() const { return checkpointing_; }
  // Mixture of experts: while on, every forward keeps its MoE layers' router logits for take_router_logits() (the
  // load-balancing loss reads them, with their autograd history); off, as for inference, nothing is kept.
  void set_collect_router_logits(bool on) { collect_router_logits_ = on; }
  bool collect_router_logits() const { return collect_router_logits_; }
  // The router logits [N, E] of the MoE layers, in layer order, of the forwards since the last call; clears them.
  std::vector<at::Tensor> take_router_logits() { return std::exchange(router_logits_, {}); }
  const ModelArgs& args() const { return args_; }
  DecoderLayer layer(int64_t i) const;
  // Every projection of the decoder layers (the LoRA-capable and quantizable ones), keyed by its HF module path
  // (model.layers.N.self_attn.q_proj), in registration order.
  std::vector<std::pair<std::string, Linear>> projections() const;
  // The experts of every MoE layer, keyed by their module path (model.layers.N.mlp.experts), in layer order.
  std::vector<std::pair<std::string, MoeExperts>> moe_experts() const;
  Backbone& backbone() { return *model_; }

  // The stored tensors of a checkpoint part this model does not run (a multimodal checkpoint's vision tower and
  // projector: model/checkpoint_names.h, passes_through), as read, on the CPU: save_pretrained writes them back.
  std::vector<std::pair<std::string, at::Tensor>> passthrough;

 private:
  at::Tensor logits_of(const at::Tensor& hidden) const;  // the LM head and Gemma's final soft-cap: [..., V]
  // The rotary tables of `positions` for the full ([0]) and, gemma3_text, the sliding layers ([1]): [B, T, R] each in
  // `compute_dtype` (undefined where a model has no such layers).
  std::array<std::pair<at::Tensor, at::Tensor>, 2> rotary_tables(const at::Tensor& positions,
                                                                 at::ScalarType compute_dtype) const;
  // The decoder layers on the embedded tokens `residual` [B, T, hidden]; returns (residual, pending).
  std::pair<at::Tensor, at::Tensor> run_layers(at::Tensor residual, const AttentionPlan& plan,
                                               const std::array<std::pair<at::Tensor, at::Tensor>, 2>& rope,
                                               KVCache* cache);

  ModelArgs args_;
  Rotary rotary_;
  std::optional<Rotary> local_rotary_;  // gemma3_text: the sliding layers' rope (local_rope_theta)
  std::shared_ptr<Backbone> model_;
  std::shared_ptr<WeightHolder> lm_head_;  // weight [V, hidden]; nullptr when tied
  bool checkpointing_ = false;
  bool offload_ = false;
  KernelPolicy policy_;
  bool collect_router_logits_ = false;
  std::vector<at::Tensor> router_logits_;  // [N, E] per MoE layer and forward, while collect_router_logits_
};

// Runs `layer` (DecoderLayerImpl::forward: residual and pending [B, T, hidden], pending undefined before the first
// layer) under a reentrant autograd Function that keeps only the layer's input h = residual + pending and recomputes
// the layer from it in backward (re-entering autocast and the RNG state of the forward). Returns (residual, delta) as
// the layer does, with the same values. model/activation_checkpointing.cpp.
std::pair<at::Tensor, at::Tensor> checkpointed_layer(DecoderLayerImpl& layer, const at::Tensor& residual,
                                                     const at::Tensor& pending, const LayerContext& ctx);

}  // namespace ft::model

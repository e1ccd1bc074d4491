// LoRA adapters with PEFT's semantics and file format (adapter_model.safetensors + adapter_config.json).
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/pretrained.h"
#include "model/transformer.h"

namespace ft::model {

// The projections of this model's family: q/k/v/o_proj, gate/up/down_proj, or for phi3 qkv_proj, o_proj,
// gate_up_proj, down_proj. MoE models (qwen3_moe, mixtral): q/k/v/o_proj and the experts' gate_up_proj and
// down_proj and the router gate (model/moe_lora.h), as PEFT's target_parameters.
std::vector<std::string> lora_target_names(const ModelArgs& args);

// lora.targets with PEFT's shorthand all-linear (alone) replaced by every projection name of the family; other lists
// as given. A target is a projection name (q_proj: that projection of every layer) or a dotted path matched as
// PEFT does, by suffix (model.layers.3.self_attn.q_proj: one layer's; mlp.down_proj).
std::vector<std::string> resolve_lora_targets(const std::vector<std::string>& targets, const ModelArgs& args);

// What apply_lora refuses, without changing `model` (config validate runs it on a model built without weights):
// ft::ConfigError for a target that matches no projection of this model, rank < 1 or dropout outside [0, 1).
void check_lora_settings(const Transformer& model, const ft::LoraConfig& cfg);

// Freezes every base parameter and adds lora_A (F32 [r, in], kaiming-uniform from `seed`) and lora_B (F32 [out, r],
// zeros) to each targeted projection (resolve_lora_targets); each layer's q/k/v and gate/up weights then share one
// buffer (join_frozen_weights), so call it once the base is on its device and in its dtype. Throws what
// check_lora_settings does.
void apply_lora(Transformer& model, const ft::LoraConfig& cfg, uint64_t seed);

// The parameters with requires_grad (every parameter without LoRA; only the adapters with it).
std::vector<at::Tensor> trainable_parameters(Transformer& model);

// The adapter tensors under PEFT's names (base_model.model.<module>.lora_A.weight), in registration order, then the
// token rows of added tokens (base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta, and
// lm_head's when untied), as PEFT's trainable_token_indices stores them.
std::vector<std::pair<std::string, at::Tensor>> adapter_tensors(const Transformer& model);

// Writes adapter_model.safetensors (F32) and adapter_config.json (peft_type LORA, task_type CAUSAL_LM) into `dir`;
// with token rows, adapter_config.json's trainable_token_indices lists their ids (a list when tied, else
// {"embed_tokens": ids, "lm_head": ids}); PEFT (>= 0.15) loads that onto a base model resized to the vocabulary
// (resize_token_embeddings(len(tokenizer)), which AutoPeftModelForCausalLM does by itself).
void save_adapter(const Transformer& model, const ft::LoraConfig& cfg, const std::filesystem::path& dir,
                  const std::string& base_model_name_or_path);
// What save_adapter writes (F32 adapter tensors and adapter_config.json), for write_model_files.
ModelFiles adapter_files(const Transformer& model, const ft::LoraConfig& cfg,
                         const std::string& base_model_name_or_path);

// Reads adapter_config.json (r, lora_alpha, lora_dropout, target_modules: a list, all-linear, or a regex PEFT
// full-matches against module paths; use_rslora) and the adapter weights,
// adding adapters where missing. trainable_token_indices (added tokens) grows the model's vocabulary to the
// largest id (and to PEFT's saved resized embedding matrices, which are loaded when present) and adds token rows
// holding the adapter's rows. Throws ft::Error naming the file and tensor for a missing, unexpected or
// mis-shaped tensor, and ft::ConfigError for PEFT options this model does not implement (DoRA, bias, patterns,
// modules_to_save). Returns the LoraConfig the adapter was saved with.
ft::LoraConfig load_adapter(Transformer& model, const std::filesystem::path& dir);

// The base model alone for the scope, as PEFT's disable_adapter(): every adapter and token row is set aside (the
// parameters stay registered and unchanged) and put back at the end, also on exceptions. The preference objectives'
// reference forward runs inside one.
class AdaptersDisabled {
 public:
  explicit AdaptersDisabled(Transformer& model);
  ~AdaptersDisabled();
  AdaptersDisabled(const AdaptersDisabled&) = delete;
  AdaptersDisabled& operator=(const AdaptersDisabled&) = delete;

 private:
  struct SetAside {
    LinearImpl* layer;
    at::Tensor lora_a, lora_b;
  };
  std::vector<SetAside> adapters_;
  std::vector<std::pair<WeightHolder*, at::Tensor>> token_rows_;
  std::vector<std::pair<ops::ExpertAdapter*, ops::ExpertAdapter>> moe_adapters_;  // model/moe_lora.h
};

// Folds every adapter into its base weight (W += alpha/r * B A), writes the token rows into the embedding and LM
// head, and removes them all.
void merge_lora(Transformer& model);

}  // namespace ft::model

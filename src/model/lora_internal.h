// What lora.cpp (adapters on a model) and lora_io.cpp (PEFT adapter files) share: PEFT's names and target rule.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "model/transformer.h"

namespace ft::model::lora_detail {

inline constexpr const char* kPeftPrefix = "base_model.model.";
// PEFT's trainable_token_indices (TrainableTokensWrapper): the trained rows, and the whole resized matrix PEFT adds
// when the vocabulary changed (we write only the rows; loading accepts both).
inline constexpr const char* kTokenDelta = ".token_adapter.trainable_tokens_delta";
inline constexpr const char* kTokenBase = ".token_adapter.base_layer.weight";
inline const std::string kEmbedPath = "model.embed_tokens";
inline const std::string kLmHeadPath = "lm_head";
inline const std::string kAllLinear = "all-linear";  // PEFT's shorthand for every linear layer but the output head

// PEFT's key prefix of module `path` (ours: model.layers.0.self_attn.q_proj, model.embed_tokens, lm_head):
// base_model.model. and transformers' module path (model/checkpoint_names.h: a multimodal model's differs).
std::string peft_module(const std::string& path, const ModelArgs& args);

// PEFT's rule for a list of target_modules: a module is adapted when its path equals a target or ends with "." +
// target.
bool target_matches(const std::string& path, const std::string& target);
// Every target must adapt at least one projection of this model (as PEFT refuses a target it finds nowhere); `where`
// names the setting or file in the error.
void check_targets(const std::vector<std::string>& targets, const Transformer& model, const std::string& where);
// lora_A/lora_B (cfg.rank, cfg.dropout, scaling_alpha / rank; A from `seed`) on every targeted projection without one.
void add_adapters(Transformer& model, const std::vector<std::string>& targets, const ft::LoraConfig& cfg,
                  double scaling_alpha, uint64_t seed);

}  // namespace ft::model::lora_detail

// Writing ModelArgs as a config.json that transformers' from_pretrained reads (model/args.h): save_hf_config.
#include <nlohmann/json.hpp>

#include "model/args.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fs.h"

namespace ft::model {

using json = nlohmann::json;

namespace {

// bos_token_id, eos_token_id (a list when there are several) and pad_token_id, null when unknown.
void put_special_token_ids(const ModelArgs& a, json& j) {
  j["bos_token_id"] = a.bos_token_id ? json(*a.bos_token_id) : json(nullptr);
  if (a.eos_token_ids.size() > 1) {
    j["eos_token_id"] = a.eos_token_ids;
  } else {
    j["eos_token_id"] = a.eos_token_id ? json(*a.eos_token_id) : json(nullptr);
  }
  j["pad_token_id"] = a.pad_token_id ? json(*a.pad_token_id) : json(nullptr);
}

void save_gemma_fields(const ModelArgs& a, json& j) {
  const auto optional = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  j["hidden_activation"] = a.hidden_act;
  j["attention_bias"] = a.attention_bias;
  // Gemma2Config / Gemma3TextConfig declare it an int (strictly checked by transformers 5).
  const double scalar = a.query_pre_attn_scalar.value_or(256.0);
  j["query_pre_attn_scalar"] =
      scalar == std::floor(scalar) && std::abs(scalar) < 9e15 ? json(static_cast<int64_t>(scalar)) : json(scalar);
  // gemma3_text's attention ignores attn_logit_softcapping (transformers never passes it on): kept as loaded.
  if (a.model_type == "gemma2") j["attn_logit_softcapping"] = optional(a.attn_logit_softcapping);
  j["final_logit_softcapping"] = optional(a.final_logit_softcapping);
  j["sliding_window"] = a.sliding_window ? json(*a.sliding_window) : json(nullptr);
  json types = json::array();
  for (int64_t i = 0; i < a.num_layers; ++i) {
    const bool slides = a.sliding_layers.empty() || a.sliding_layers[static_cast<size_t>(i)];
    types.push_back(slides ? "sliding_attention" : "full_attention");
  }
  j["layer_types"] = types;
}

// The experts and router under the family's own keys (the alias of num_experts is dropped: transformers 5's strict
// configs refuse both).
void save_moe_fields(const ModelArgs& a, json& j) {
  const bool mixtral = a.model_type == "mixtral";
  j.erase(mixtral ? "num_experts" : "num_local_experts");
  j[mixtral ? "num_local_experts" : "num_experts"] = a.num_experts;
  j["num_experts_per_tok"] = a.num_experts_per_tok;
  j["router_aux_loss_coef"] = a.router_aux_loss_coef;
  j["output_router_logits"] = a.output_router_logits;
  if (mixtral) {
    j["router_jitter_noise"] = a.router_jitter_noise;
    return;
  }
  j["moe_intermediate_size"] = a.moe_intermediate_size;
  j["norm_topk_prob"] = a.norm_topk_prob;
  j["decoder_sparse_step"] = a.decoder_sparse_step;
  j["mlp_only_layers"] = a.mlp_only_layers;
}

// The special-token ids and the weights' dtype (both key spellings transformers reads).
void put_tokens_and_dtype(const ModelArgs& a, json& j) {
  put_special_token_ids(a, j);
  j["torch_dtype"] = a.torch_dtype;
  j["dtype"] = a.torch_dtype;
}

// Our fields over `j` (the loaded file's keys, or its text_config's for a multimodal checkpoint).
json language_model_config(const ModelArgs& a, json j) {
  if (const Family* f = find_family(a.model_type); f != nullptr && a.multimodal_type.empty()) {
    j["architectures"] = {f->architecture};
  }
  j["model_type"] = a.model_type;
  j["vocab_size"] = a.vocab_size;
  j["hidden_size"] = a.hidden_size;
  j["intermediate_size"] = a.intermediate_size;
  j["num_hidden_layers"] = a.num_layers;
  j["num_attention_heads"] = a.num_heads;
  j["num_key_value_heads"] = a.num_kv_heads;
  j["head_dim"] = a.head_dim;
  j["max_position_embeddings"] = a.max_position_embeddings;
  j["rms_norm_eps"] = a.rms_norm_eps;
  j["tie_word_embeddings"] = a.tie_word_embeddings;
  j["hidden_act"] = a.hidden_act;
  j["rope_theta"] = a.rope_theta;
  json rope = {{"rope_type", a.rope_scaling.type}, {"rope_theta", a.rope_theta}};
  if (a.rope_scaling.type == "linear") rope["factor"] = a.rope_scaling.factor;
  if (a.rope_scaling.type == "llama3") {
    rope["factor"] = a.rope_scaling.factor;
    rope["low_freq_factor"] = a.rope_scaling.low_freq_factor;
    rope["high_freq_factor"] = a.rope_scaling.high_freq_factor;
    rope["original_max_position_embeddings"] = a.rope_scaling.original_max_position_embeddings;
  }
  if (a.rope_scaling.type == "yarn") {
    const auto& s = a.rope_scaling;
    rope["factor"] = s.factor;
    // Left out when it is max_position_embeddings, its default: transformers 4.x would then derive factor 1 from it.
    if (s.original_max_position_embeddings != a.max_position_embeddings) {
      rope["original_max_position_embeddings"] = s.original_max_position_embeddings;
    }
    rope["beta_fast"] = s.beta_fast;
    rope["beta_slow"] = s.beta_slow;
    if (!s.truncate) rope["truncate"] = false;
    if (s.attention_factor) rope["attention_factor"] = *s.attention_factor;
    if (s.mscale) rope["mscale"] = *s.mscale;
    if (s.mscale_all_dim) rope["mscale_all_dim"] = *s.mscale_all_dim;
  }
  json rope_scaling = rope;
  if (a.rope_scaling.type == "longrope") {
    const auto& s = a.rope_scaling;
    rope["type"] = "longrope";
    rope["short_factor"] = s.short_factor;
    rope["long_factor"] = s.long_factor;
    if (s.longrope_factor) rope["factor"] = *s.longrope_factor;
    if (s.attention_factor) rope["attention_factor"] = *s.attention_factor;
    rope["original_max_position_embeddings"] = s.original_max_position_embeddings;
    // transformers 4.x's Phi3Config accepts exactly these three keys; 5.x reads rope_scaling before
    // rope_parameters, so a factor or attention factor of the config goes there too (4.x refuses those files).
    rope_scaling = {{"type", "longrope"}, {"short_factor", s.short_factor}, {"long_factor", s.long_factor}};
    if (s.longrope_factor || s.attention_factor) rope_scaling = rope;
  }
  if (a.model_type == "phi3") rope["partial_rotary_factor"] = a.partial_rotary_factor;
  // Both layouts, so transformers 4.x and 5.x read the same rope (yarn aside: 4.x takes its factor from
  // max_position_embeddings / original_max_position_embeddings where the latter is given; finetune follows 5.x).
  j["rope_parameters"] = rope;
  if (a.rope_scaling.type == "default") {
    j["rope_scaling"] = nullptr;
  } else {
    j["rope_scaling"] = rope_scaling;
  }
  if (a.model_type == "gemma3_text") {  // 5.x: one rope per layer type; 4.x: rope_local_base_freq
    const double local = a.local_rope_theta.value_or(10000.0);
    j["rope_parameters"] = {{"full_attention", rope},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", local}}}};
    j["rope_local_base_freq"] = local;
  }
  if (a.gemma) save_gemma_fields(a, j);
  if (a.model_type == "llama") {
    j["attention_bias"] = a.attention_bias;
    j["mlp_bias"] = a.mlp_bias;
  }
  const bool qwen3 = a.model_type == "qwen3" || a.model_type == "qwen3_moe";
  if (a.model_type == "qwen2" || qwen3) j["use_sliding_window"] = false;
  if (qwen3) j["attention_bias"] = a.attention_bias;
  if (a.num_experts > 0) save_moe_fields(a, j);
  if (a.model_type == "mistral" || a.model_type == "phi3" || a.model_type == "mixtral")
    j["sliding_window"] = a.sliding_window ? json(*a.sliding_window) : json(nullptr);
  if (a.model_type == "phi3") {
    j["partial_rotary_factor"] = a.partial_rotary_factor;
    j["original_max_position_embeddings"] = a.rope_scaling.original_max_position_embeddings;
  }
  put_tokens_and_dtype(a, j);
  return j;
}

}  // namespace

void save_hf_config(const ModelArgs& a, const std::filesystem::path& path) {
  json j = a.raw_config_json.empty() ? json::object() : json::parse(a.raw_config_json);
  if (a.multimodal_type.empty()) {
    j = language_model_config(a, std::move(j));
  } else {  // the language model's fields in text_config; generation reads the special tokens and dtype outside
    const bool has_text = j.contains("text_config") && j["text_config"].is_object();
    j["text_config"] = language_model_config(a, has_text ? j["text_config"] : json::object());
    put_tokens_and_dtype(a, j);
  }
  ft::write_file(path, j.dump(2) + "\n");
}

void save_generation_config(const ModelArgs& args, const std::filesystem::path& path) {
  json j = json::object();
  put_special_token_ids(args, j);
  ft::write_file(path, j.dump(2) + "\n");
}

void fill_special_token_ids(ModelArgs& args, int64_t bos_id, int64_t eos_id, int64_t pad_id) {
  if (!args.bos_token_id && bos_id >= 0) args.bos_token_id = bos_id;
  if (!args.eos_token_id && args.eos_token_ids.empty() && eos_id >= 0) {
    args.eos_token_id = eos_id;
    args.eos_token_ids = {eos_id};
  }
  if (!args.pad_token_id && pad_id >= 0) args.pad_token_id = pad_id;
}

}  // namespace ft::model

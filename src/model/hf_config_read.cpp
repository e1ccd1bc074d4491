// Reading a Hugging Face config.json into ModelArgs (model/args.h): parse_hf_config, load_hf_config.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/args.h"
#include "util/error.h"
#include "util/fs.h"

namespace ft::model {
namespace {

using nlohmann::json;

struct Reader {
  const json& j;
  const std::string& source;

  ConfigError missing(const std::string& key) const {
    return ConfigError(source + ": missing required field \"" + key + "\"",
                       "config.json must come from transformers, of a family `finetune info` lists");
  }
  int64_t req_int(const std::string& key) const {
    if (!j.contains(key) || j[key].is_null()) throw missing(key);
    if (!j[key].is_number_integer()) throw ConfigError(source + ": field \"" + key + "\" must be an integer");
    return j[key].get<int64_t>();
  }
  std::optional<int64_t> opt_int(const std::string& key) const {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (j[key].is_array()) {
      if (j[key].empty()) return std::nullopt;
      for (const auto& e : j[key]) {  // a float converted unchecked would be undefined behaviour
        if (!e.is_number_integer()) throw ConfigError(source + ": field \"" + key + "\" must hold integers");
      }
      return j[key][0].get<int64_t>();
    }
    if (!j[key].is_number_integer()) throw ConfigError(source + ": field \"" + key + "\" must be an integer");
    return j[key].get<int64_t>();
  }
  double num(const json& obj, const std::string& key, double fallback, const std::string& prefix = "") const {
    if (!obj.contains(key) || obj[key].is_null()) return fallback;
    if (!obj[key].is_number()) throw ConfigError(source + ": field \"" + prefix + key + "\" must be a number");
    return obj[key].get<double>();
  }
  bool flag(const std::string& key, bool fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) throw ConfigError(source + ": field \"" + key + "\" must be true or false");
    return j[key].get<bool>();
  }
};

// Phi-3 / Phi-3.5 / Phi-4-mini: fused projections, no biases (transformers ignores the bias flags), partial
// rotary, the original context of longrope (the top-level key wins over a nested one, as in transformers).
void parse_phi3(const Reader& r, ModelArgs& a) {
  const json& j = r.j;
  a.fused_projections = true;
  a.sliding_window = r.opt_int("sliding_window");
  const json* rp = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? &j["rope_parameters"] : nullptr;
  a.partial_rotary_factor = r.num(j, "partial_rotary_factor",
                                  rp != nullptr ? r.num(*rp, "partial_rotary_factor", 1.0, "rope_parameters.") : 1.0);
  if (!(a.partial_rotary_factor > 0.0 && a.partial_rotary_factor <= 1.0) || a.rotary_dim() % 2 != 0) {
    throw ConfigError(r.source + ": partial_rotary_factor " + std::to_string(a.partial_rotary_factor) +
                      " must be in (0, 1] and rotate an even number of the " + std::to_string(a.head_dim) +
                      " dims of a head");
  }
  if (const auto omp = r.opt_int("original_max_position_embeddings")) {
    a.rope_scaling.original_max_position_embeddings = *omp;
  } else if (a.rope_scaling.type != "longrope") {
    a.rope_scaling.original_max_position_embeddings = 4096;
  }
  if (a.rope_scaling.type == "longrope") {
    const size_t pairs = static_cast<size_t>(a.rotary_dim() / 2);
    if (a.rope_scaling.short_factor.size() != pairs || a.rope_scaling.long_factor.size() != pairs) {
      throw ConfigError(r.source + ": longrope short_factor and long_factor need " + std::to_string(pairs) +
                        " entries (half the rotated dims), found " +
                        std::to_string(a.rope_scaling.short_factor.size()) + " and " +
                        std::to_string(a.rope_scaling.long_factor.size()));
    }
    if (a.rope_scaling.original_max_position_embeddings <= 1) {
      throw ConfigError(r.source + ": original_max_position_embeddings must be above 1 for longrope");
    }
  }
  for (const char* key : {"resid_pdrop", "attention_dropout"}) {
    if (r.num(j, key, 0.0) != 0.0) {
      throw ConfigError(r.source + ": " + key + " > 0 is not supported",
                        "set it to 0.0, as the released Phi-3 configs do");
    }
  }
}

// YaRN's fields as transformers' _compute_yarn_parameters reads them: the original context from the top level first
// (standardize_rope_params), then the object, then max_position_embeddings; a null factor is max / original; a zero
// (or absent) beta_fast or beta_slow is 32 or 1 (`or` in Python).
void parse_yarn(const Reader& r, const json& rp, const std::string& prefix, ModelArgs& a) {
  auto& s = a.rope_scaling;
  std::optional<int64_t> original = r.opt_int("original_max_position_embeddings");
  if (!original) original = Reader{rp, r.source}.opt_int("original_max_position_embeddings");
  s.original_max_position_embeddings = original.value_or(a.max_position_embeddings);
  if (s.original_max_position_embeddings <= 0) {
    throw ConfigError(r.source + ": \"" + prefix + "original_max_position_embeddings\" must be positive");
  }
  if (!rp.contains("factor")) throw ConfigError(r.source + ": yarn rope scaling lacks \"" + prefix + "factor\"");
  s.factor = r.num(
      rp, "factor",
      static_cast<double>(a.max_position_embeddings) / static_cast<double>(s.original_max_position_embeddings), prefix);
  if (!(s.factor > 0.0 && std::isfinite(s.factor))) {
    throw ConfigError(r.source + ": \"" + prefix + "factor\" must be a positive number");
  }
  auto optional_num = [&](const char* key) {
    return rp.contains(key) && !rp[key].is_null() ? std::optional<double>(r.num(rp, key, 0.0, prefix)) : std::nullopt;
  };
  s.attention_factor = optional_num("attention_factor");
  s.mscale = optional_num("mscale");
  s.mscale_all_dim = optional_num("mscale_all_dim");
  s.beta_fast = optional_num("beta_fast").value_or(0.0);
  s.beta_slow = optional_num("beta_slow").value_or(0.0);
  if (s.beta_fast == 0.0) s.beta_fast = 32.0;
  if (s.beta_slow == 0.0) s.beta_slow = 1.0;
  if (!(s.beta_fast > 0.0 && s.beta_slow > 0.0)) {
    throw ConfigError(r.source + ": \"" + prefix + "beta_fast\" and \"" + prefix + "beta_slow\" must be positive");
  }
  if (rp.contains("truncate")) {  // null is falsy in transformers' check: no truncation
    if (!rp["truncate"].is_boolean() && !rp["truncate"].is_null()) {
      throw ConfigError(r.source + ": \"" + prefix + "truncate\" must be true or false");
    }
    s.truncate = rp["truncate"].is_boolean() && rp["truncate"].get<bool>();
  }
}

// One rope object (rope_parameters, rope_scaling, or one layer type's entry of gemma3's rope_parameters): its type
// and that type's fields. `prefix` names the object in errors.
void parse_rope_object(const Reader& r, const json& rp, const std::string& prefix, ModelArgs& a) {
  if (!rp.is_object())
    throw ConfigError(r.source + ": field \"" + prefix.substr(0, prefix.size() - 1) + "\" must be an object");
  a.rope_theta = r.num(rp, "rope_theta", a.rope_theta, prefix);
  std::string type = "default";
  if (rp.contains("rope_type"))
    type = rp["rope_type"].get<std::string>();
  else if (rp.contains("type"))
    type = rp["type"].get<std::string>();
  const bool phi3 = a.model_type == "phi3";
  if (phi3 && (type == "su" || type == "yarn")) type = "longrope";  // transformers' Phi3Config renames them
  if (type != "default" && type != "llama3" && type != "linear" && type != "yarn" && !(phi3 && type == "longrope")) {
    throw ConfigError(r.source + ": unsupported " + prefix + "rope_type \"" + type + "\"",
                      "supported rope types: default, linear, llama3, yarn, and longrope for phi3");
  }
  a.rope_scaling.type = type;
  if (type == "yarn") parse_yarn(r, rp, prefix, a);
  if (type == "linear") {
    if (!rp.contains("factor")) throw ConfigError(r.source + ": linear rope scaling lacks \"" + prefix + "factor\"");
    a.rope_scaling.factor = r.num(rp, "factor", 1.0, prefix);
    if (!(a.rope_scaling.factor >= 1.0)) throw ConfigError(r.source + ": \"" + prefix + "factor\" must be >= 1");
  }
  if (type == "longrope") {
    auto factors = [&](const char* f) {
      if (!rp.contains(f) || !rp[f].is_array())
        throw ConfigError(r.source + ": longrope needs a list \"" + prefix + f + "\"");
      std::vector<double> v;
      for (const auto& x : rp[f]) {
        if (!x.is_number()) throw ConfigError(r.source + ": \"" + prefix + f + "\" must hold numbers");
        v.push_back(x.get<double>());
      }
      return v;
    };
    a.rope_scaling.original_max_position_embeddings = 4096;  // Phi3Config's default
    a.rope_scaling.short_factor = factors("short_factor");
    a.rope_scaling.long_factor = factors("long_factor");
    if (rp.contains("factor") && !rp["factor"].is_null())
      a.rope_scaling.longrope_factor = r.num(rp, "factor", 1.0, prefix);
    if (rp.contains("attention_factor") && !rp["attention_factor"].is_null())
      a.rope_scaling.attention_factor = r.num(rp, "attention_factor", 1.0, prefix);
    if (rp.contains("original_max_position_embeddings") && rp["original_max_position_embeddings"].is_number_integer())
      a.rope_scaling.original_max_position_embeddings = rp["original_max_position_embeddings"].get<int64_t>();
  }
  if (type == "llama3") {
    for (const char* f : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!rp.contains(f)) throw ConfigError(r.source + ": llama3 rope scaling lacks \"" + prefix + f + "\"");
    }
    a.rope_scaling.factor = r.num(rp, "factor", 1.0, prefix);
    a.rope_scaling.low_freq_factor = r.num(rp, "low_freq_factor", 1.0, prefix);
    a.rope_scaling.high_freq_factor = r.num(rp, "high_freq_factor", 4.0, prefix);
    // Found by tests/fuzz/fuzz_model_config: a float here (1e100) was converted to int64 unchecked (UB).
    const json& original = rp["original_max_position_embeddings"];
    if (!original.is_number_integer() || original.get<int64_t>() <= 0) {
      throw ConfigError(r.source + ": \"" + prefix + "original_max_position_embeddings\" must be a positive integer");
    }
    a.rope_scaling.original_max_position_embeddings = original.get<int64_t>();
  }
}

// gemma3_text: the global layers' rope (rope_theta, rope_scaling) and the sliding layers' base, in transformers 5's
// per-layer-type rope_parameters or 4.x's rope_theta / rope_scaling / rope_local_base_freq.
void parse_gemma3_rope(const Reader& r, ModelArgs& a) {
  const json& j = r.j;
  a.rope_theta = r.num(j, "rope_theta", 1000000.0);
  a.local_rope_theta = r.num(j, "rope_local_base_freq", 10000.0);
  const json* per_type =
      j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
              (j["rope_parameters"].contains("full_attention") || j["rope_parameters"].contains("sliding_attention"))
          ? &j["rope_parameters"]
          : nullptr;
  if (per_type == nullptr) {
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      if (j.contains(key) && !j[key].is_null()) return parse_rope_object(r, j[key], std::string(key) + ".", a);
    }
    return;
  }
  if (per_type->contains("full_attention") && !(*per_type)["full_attention"].is_null()) {
    parse_rope_object(r, (*per_type)["full_attention"], "rope_parameters.full_attention.", a);
  }
  if (per_type->contains("sliding_attention") && !(*per_type)["sliding_attention"].is_null()) {
    ModelArgs local;
    local.model_type = a.model_type;
    local.rope_theta = *a.local_rope_theta;
    parse_rope_object(r, (*per_type)["sliding_attention"], "rope_parameters.sliding_attention.", local);
    if (local.rope_scaling.type != "default") {
      throw ConfigError(r.source + ": rope_parameters.sliding_attention.rope_type \"" + local.rope_scaling.type +
                            "\" is not supported",
                        "the sliding layers of Gemma 3 use the default rope");
    }
    a.local_rope_theta = local.rope_theta;
  }
}

void parse_rope(const Reader& r, ModelArgs& a) {
  if (a.model_type == "gemma3_text") return parse_gemma3_rope(r, a);
  const json& j = r.j;
  // transformers 5 writes rope_parameters (with rope_theta inside); 4.x writes rope_theta + rope_scaling. With both,
  // 5 reads rope_scaling unless it is null or {} (convert_rope_params_to_dict): a rope_scaling block added to a
  // saved config, as the Qwen model cards enable YaRN, takes effect.
  const bool scaling = j.contains("rope_scaling") && !j["rope_scaling"].is_null() &&
                       !(j["rope_scaling"].is_object() && j["rope_scaling"].empty());
  const char* key = scaling ? "rope_scaling" : "rope_parameters";
  a.rope_theta = r.num(j, "rope_theta", a.model_type == "mixtral" ? 1000000.0 : 10000.0);  // MixtralConfig's
  if (!j.contains(key) || j[key].is_null()) return;
  parse_rope_object(r, j[key], std::string(key) + ".", a);
}

// Gemma 2 and Gemma 3 text: the fields LlamaConfig lacks, with Gemma2Config's / Gemma3TextConfig's defaults.
void parse_gemma(const Reader& r, ModelArgs& a) {
  const json& j = r.j;
  const bool gemma2 = a.model_type == "gemma2";
  a.gemma = true;
  a.qk_norm = !gemma2;
  a.attention_bias = r.flag("attention_bias", false);  // q/k/v and o
  a.o_proj_bias = a.attention_bias;
  a.hidden_act = "gelu_pytorch_tanh";  // the default of both configs; hidden_activation wins over hidden_act
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    if (j.contains(key) && j[key].is_string()) {
      a.hidden_act = j[key].get<std::string>();
      break;
    }
  }
  if (a.hidden_act != "gelu_pytorch_tanh") {
    throw ConfigError(r.source + ": unsupported hidden_activation \"" + a.hidden_act + "\" for " + a.model_type,
                      "Gemma 2 and 3 use gelu_pytorch_tanh");
  }
  a.query_pre_attn_scalar = r.num(j, "query_pre_attn_scalar", 256.0);
  if (!(*a.query_pre_attn_scalar > 0.0)) throw ConfigError(r.source + ": query_pre_attn_scalar must be positive");
  auto cap = [&](const char* key, std::optional<double> fallback) -> std::optional<double> {
    if (!j.contains(key)) return fallback;
    if (j[key].is_null()) return std::nullopt;
    const double v = r.num(j, key, 0.0);
    if (!(v > 0.0)) throw ConfigError(r.source + ": " + key + " must be positive or null");
    return v;
  };
  // Gemma3TextConfig has attn_logit_softcapping too, but its attention never applies it (as transformers).
  if (gemma2) a.attn_logit_softcapping = cap("attn_logit_softcapping", 50.0);
  a.final_logit_softcapping = cap("final_logit_softcapping", gemma2 ? std::optional<double>(30.0) : std::nullopt);
  a.sliding_window = j.contains("sliding_window") ? r.opt_int("sliding_window") : std::optional<int64_t>(4096);
  if (a.sliding_window && *a.sliding_window <= 0) throw ConfigError(r.source + ": sliding_window must be positive");
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& types = j["layer_types"];
    if (!types.is_array() || static_cast<int64_t>(types.size()) != a.num_layers) {
      throw ConfigError(r.source + ": layer_types must list one entry per layer (" + std::to_string(a.num_layers) +
                        ")");
    }
    for (const auto& t : types) {
      if (t != "sliding_attention" && t != "full_attention") {
        throw ConfigError(r.source + ": unsupported layer type " + t.dump(),
                          "layer_types holds sliding_attention or full_attention");
      }
      a.sliding_layers.push_back(t == "sliding_attention");
    }
  } else {
    // Gemma 2 alternates (the first layer slides); Gemma 3 slides except every sliding_window_pattern-th layer.
    const int64_t pattern = gemma2 ? 2 : r.opt_int("sliding_window_pattern").value_or(6);
    if (pattern <= 0) throw ConfigError(r.source + ": sliding_window_pattern must be positive");
    for (int64_t i = 0; i < a.num_layers; ++i) a.sliding_layers.push_back((i + 1) % pattern != 0);
  }
  if (r.num(j, "attention_dropout", 0.0) != 0.0) {
    throw ConfigError(r.source + ": attention_dropout > 0 is not supported",
                      "set it to 0.0, as the released configs do");
  }
  if (r.flag("use_bidirectional_attention", false)) {
    throw ConfigError(r.source + ": use_bidirectional_attention is not supported", "fine-tune the causal model");
  }
}

json parse_json_object(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw ConfigError(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw ConfigError(source + ": not a JSON object");
  return j;
}

bool is_gemma(const ModelArgs& a) {
  return a.model_type == "gemma2" || a.model_type == "gemma3_text";
}

// model_type, architectures and hidden_act: which family the file is, and that finetune implements it.
void parse_family(const Reader& r, ModelArgs& a) {
  const json& j = r.j;
  if (!j.contains("model_type")) throw r.missing("model_type");
  a.model_type = j["model_type"].get<std::string>();
  if (find_family(a.model_type) == nullptr) {
    throw ConfigError(r.source + ": unsupported model_type \"" + a.model_type + "\"", "supported: " + families_text());
  }
  if (j.contains("architectures") && j["architectures"].is_array()) {
    for (const auto& arch : j["architectures"]) {
      const auto s = arch.get<std::string>();
      const auto& all = families();
      if (std::none_of(all.begin(), all.end(), [&](const Family& f) { return s == f.architecture; })) {
        std::string known;
        for (const auto& f : all) known += (known.empty() ? "" : ", ") + std::string(f.architecture);
        throw ConfigError(r.source + ": unsupported architecture \"" + s + "\"", "supported: " + known);
      }
    }
  }
  if (!is_gemma(a) && j.contains("hidden_act") && j["hidden_act"] != "silu") {
    throw ConfigError(r.source + ": unsupported hidden_act " + j["hidden_act"].dump(),
                      "only silu (SwiGLU) is supported");
  }
}

// The sizes: vocabulary, widths, layers, heads, and the context length.
void parse_shape(const Reader& r, ModelArgs& a) {
  a.vocab_size = r.req_int("vocab_size");
  a.hidden_size = r.req_int("hidden_size");
  a.intermediate_size = r.req_int("intermediate_size");
  a.num_layers = r.req_int("num_hidden_layers");
  // Per-layer settings (Gemma's layer types) are lists of this length: a damaged file must not size one at 10^12.
  constexpr int64_t kMaxLayers = 10000;
  if (a.num_layers <= 0 || a.num_layers > kMaxLayers) {
    throw ConfigError(r.source + ": num_hidden_layers " + std::to_string(a.num_layers) + " is outside [1, " +
                      std::to_string(kMaxLayers) + "]");
  }
  a.num_heads = r.req_int("num_attention_heads");
  a.num_kv_heads = r.opt_int("num_key_value_heads").value_or(a.num_heads);
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) {
    throw ConfigError(r.source + ": num_attention_heads must be a positive multiple of num_key_value_heads");
  }
  a.head_dim = r.opt_int("head_dim").value_or(is_gemma(a) ? 256 : a.hidden_size / a.num_heads);
  a.max_position_embeddings = r.opt_int("max_position_embeddings")
                                  .value_or(a.model_type == "phi3"          ? 4096
                                            : a.model_type == "gemma2"      ? 8192
                                            : a.model_type == "gemma3_text" ? 131072
                                            : a.model_type == "mixtral"     ? 131072
                                            : a.model_type == "qwen3_moe"   ? 32768
                                                                            : 2048);
}

// Qwen 2 / 2.5 / 3: q/k/v biases (qwen2) or the attention_bias flag and q/k norms (qwen3); no sliding window.
void parse_qwen(const Reader& r, ModelArgs& a) {
  if (a.model_type == "qwen2") {
    a.attention_bias = true;  // q/k/v only
  } else {
    a.attention_bias = r.flag("attention_bias", false);  // q/k/v and o
    a.o_proj_bias = a.attention_bias;
    a.qk_norm = true;
  }
  if (r.flag("use_sliding_window", false)) {
    throw ConfigError(r.source + ": use_sliding_window=true is not supported for " + a.model_type,
                      "set use_sliding_window to false (the Qwen2/2.5/3 releases ship with it off)");
  }
}

// num_experts, or its alias num_local_experts (both configs' attribute_map), whichever the file has.
int64_t expert_count(const Reader& r, bool mixtral) {
  const char* own = mixtral ? "num_local_experts" : "num_experts";
  const char* alias = mixtral ? "num_experts" : "num_local_experts";
  return r.opt_int(own).value_or(r.opt_int(alias).value_or(mixtral ? 8 : 128));
}

// qwen3_moe's dense layers: decoder_sparse_step and mlp_only_layers (Qwen3MoeConfig's defaults: 1, none).
void parse_sparse_layers(const Reader& r, ModelArgs& a) {
  a.decoder_sparse_step = r.opt_int("decoder_sparse_step").value_or(1);
  if (a.decoder_sparse_step <= 0) throw ConfigError(r.source + ": decoder_sparse_step must be positive");
  const json& j = r.j;
  if (!j.contains("mlp_only_layers") || j["mlp_only_layers"].is_null()) return;
  if (!j["mlp_only_layers"].is_array()) throw ConfigError(r.source + ": mlp_only_layers must be a list of layers");
  for (const auto& e : j["mlp_only_layers"]) {
    if (!e.is_number_integer()) throw ConfigError(r.source + ": mlp_only_layers must hold layer indices");
    a.mlp_only_layers.push_back(e.get<int64_t>());
  }
}

// Qwen3-MoE and Mixtral: the experts and the router, with Qwen3MoeConfig's / MixtralConfig's defaults.
void parse_moe(const Reader& r, ModelArgs& a) {
  const json& j = r.j;
  const bool mixtral = a.model_type == "mixtral";
  a.num_experts = expert_count(r, mixtral);
  a.num_experts_per_tok = r.opt_int("num_experts_per_tok").value_or(mixtral ? 2 : 8);
  if (a.num_experts <= 0 || a.num_experts_per_tok <= 0 || a.num_experts_per_tok > a.num_experts) {
    throw ConfigError(
        r.source + ": num_experts_per_tok (" + std::to_string(a.num_experts_per_tok) +
            ") must be in [1, the number of experts (" + std::to_string(a.num_experts) + ")]",
        "config.json must come from transformers' " + std::string(mixtral ? "Mixtral" : "Qwen3Moe") + "Config");
  }
  a.moe_intermediate_size = mixtral ? a.intermediate_size : r.opt_int("moe_intermediate_size").value_or(768);
  if (a.moe_intermediate_size <= 0) throw ConfigError(r.source + ": moe_intermediate_size must be positive");
  a.norm_topk_prob = mixtral || r.flag("norm_topk_prob", false);  // Mixtral's router always renormalises
  if (!mixtral) parse_sparse_layers(r, a);
  a.router_aux_loss_coef = r.num(j, "router_aux_loss_coef", 0.001);
  a.output_router_logits = r.flag("output_router_logits", false);
  a.router_jitter_noise = mixtral ? r.num(j, "router_jitter_noise", 0.0) : 0.0;
  if (!(a.router_jitter_noise >= 0.0 && a.router_jitter_noise < 1.0)) {
    throw ConfigError(r.source + ": router_jitter_noise must be in [0, 1)");
  }
}

// The fields only some families have: biases, q/k norms, sliding windows, partial rotary, Gemma's extras, experts.
void parse_family_fields(const Reader& r, ModelArgs& a) {
  if (a.model_type == "qwen3_moe" || a.model_type == "mixtral") parse_moe(r, a);
  if (a.model_type == "qwen2" || a.model_type == "qwen3" || a.model_type == "qwen3_moe") {
    parse_qwen(r, a);
  } else if (a.model_type == "llama") {
    a.attention_bias = r.flag("attention_bias", false);
    a.o_proj_bias = a.attention_bias;
    a.mlp_bias = r.flag("mlp_bias", false);
  } else if (a.model_type == "phi3") {
    parse_phi3(r, a);
  } else if (is_gemma(a)) {
    parse_gemma(r, a);
  } else {
    a.sliding_window = r.opt_int("sliding_window");
  }
}

// bos/eos/pad ids (eos_token_id may be a list: all of them end generation) and the checkpoint's dtype.
void parse_tokens_and_dtype(const Reader& r, ModelArgs& a) {
  const json& j = r.j;
  a.bos_token_id = r.opt_int("bos_token_id");
  a.eos_token_id = r.opt_int("eos_token_id");
  if (j.contains("eos_token_id") && j["eos_token_id"].is_array()) {
    for (const auto& e : j["eos_token_id"]) a.eos_token_ids.push_back(e.get<int64_t>());
  } else if (a.eos_token_id) {
    a.eos_token_ids.push_back(*a.eos_token_id);
  }
  a.pad_token_id = r.opt_int("pad_token_id");
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (j.contains(key) && j[key].is_string()) {
      a.torch_dtype = j[key].get<std::string>();
      break;
    }
  }
}

// The language model's config of a Gemma 3 multimodal checkpoint (model_type gemma3): its text_config, which the
// released files give sparsely (gemma-3-4b-it: sizes, layers and rope scaling only), over Gemma3TextConfig's defaults
// (transformers 5), with the outer file's special-token ids and dtype, which generation reads there.
json gemma3_text_config(const Reader& r) {
  const json& outer = r.j;
  if (!outer.contains("text_config") || !outer["text_config"].is_object()) throw r.missing("text_config");
  json t = {{"vocab_size", 262208},      {"hidden_size", 2304},
            {"intermediate_size", 9216}, {"num_hidden_layers", 26},
            {"num_attention_heads", 8},  {"num_key_value_heads", 4},
            {"head_dim", 256},           {"query_pre_attn_scalar", 256},
            {"sliding_window", 4096},    {"max_position_embeddings", 131072},
            {"rms_norm_eps", 1e-6},      {"hidden_activation", "gelu_pytorch_tanh"},
            {"bos_token_id", 2},         {"eos_token_id", 1},
            {"pad_token_id", 0}};
  t.update(outer["text_config"]);
  if (t.contains("model_type") && t["model_type"] != "gemma3_text") {
    throw ConfigError(r.source + ": text_config.model_type " + t["model_type"].dump() + " is not gemma3_text");
  }
  t["model_type"] = "gemma3_text";
  t.erase("architectures");
  t.erase("final_logit_softcapping");  // Gemma3ForConditionalGeneration's forward never applies it
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "dtype", "torch_dtype"}) {
    if (outer.contains(key) && !outer[key].is_null()) t[key] = outer[key];
  }
  return t;
}

ModelArgs parse_fields(const std::string& json_text, const std::string& source) {
  const json outer = parse_json_object(json_text, source);
  const bool multimodal = outer.contains("model_type") && outer["model_type"] == "gemma3";
  const json j = multimodal ? gemma3_text_config(Reader{outer, source}) : outer;
  const Reader r{j, multimodal ? source + " (text_config)" : source};
  ModelArgs a;
  a.raw_config_json = json_text;
  if (multimodal) a.multimodal_type = "gemma3";
  parse_family(r, a);
  parse_shape(r, a);
  // Phi3Config's and MixtralConfig's default differs from Llama's.
  a.rms_norm_eps = r.num(j, "rms_norm_eps", a.model_type == "phi3" || a.model_type == "mixtral" ? 1e-5 : 1e-6);
  a.tie_word_embeddings = r.flag("tie_word_embeddings", is_gemma(a));
  parse_rope(r, a);
  parse_family_fields(r, a);
  parse_tokens_and_dtype(r, a);
  return a;
}

}  // namespace

ModelArgs parse_hf_config(const std::string& json_text, const std::string& source) {
  try {
    return parse_fields(json_text, source);
  } catch (const json::exception& e) {  // a field of the wrong JSON type, read without a check of its own
    throw ConfigError(source + ": a field has an unexpected type (" + e.what() + ")",
                      "compare it with the config.json that transformers writes for this model family");
  }
}

ModelArgs language_model_only(ModelArgs a) {
  if (a.multimodal_type.empty()) return a;
  const json outer = json::parse(a.raw_config_json);
  a.raw_config_json = outer.contains("text_config") ? outer["text_config"].dump() : std::string();
  a.multimodal_type.clear();
  return a;
}

ModelArgs load_hf_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  if (!std::filesystem::is_regular_file(path)) {
    throw ConfigError("cannot read " + path.string(), "--model must be a Hugging Face model directory");
  }
  return parse_hf_config(read_text_file(path), path.string());
}

}  // namespace ft::model

// ModelArgs from the config (a model trained from scratch), the model families and dtype names. config.json:
// hf_config_read.cpp and hf_config_write.cpp.
#include "model/args.h"

#include "util/error.h"

namespace ft::model {

at::ScalarType dtype_from_name(const std::string& name) {
  if (name == "float32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "fp16") return at::kHalf;
  throw ConfigError("unsupported dtype '" + name + "'", "use float32 (fp32), bfloat16 (bf16) or float16 (fp16)");
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      throw Error(std::string("no config.json name for dtype ") + c10::toString(type));
  }
}

const std::vector<Family>& families() {
  using ft::ModelFamily;
  const auto family = [](ModelFamily id, const char* architecture, const char* releases) {
    return Family{id, name_of(id), architecture, releases};
  };
  static const std::vector<Family> table = {
      family(ModelFamily::kLlama, "LlamaForCausalLM", "Llama 2/3/3.x"),
      family(ModelFamily::kMistral, "MistralForCausalLM", "Mistral 7B, Mistral Nemo"),
      family(ModelFamily::kQwen2, "Qwen2ForCausalLM", "Qwen2/2.5"),
      family(ModelFamily::kQwen3, "Qwen3ForCausalLM", "Qwen3 dense"),
      family(ModelFamily::kPhi3, "Phi3ForCausalLM", "Phi-3/3.5 mini and medium, Phi-4-mini"),
      family(ModelFamily::kGemma2, "Gemma2ForCausalLM", "Gemma 2"),
      family(ModelFamily::kGemma3Text, "Gemma3ForCausalLM",
             "Gemma 3 1B; the language model of Gemma 3 4B/12B/27B (model_type gemma3)"),
      family(ModelFamily::kQwen3Moe, "Qwen3MoeForCausalLM", "Qwen3-30B-A3B, Qwen3-235B-A22B"),
      family(ModelFamily::kMixtral, "MixtralForCausalLM", "Mixtral 8x7B, 8x22B"),
  };
  return table;
}

const Family* find_family(const std::string& model_type) {
  const auto id = parse_setting<ft::ModelFamily>(model_type);
  return id ? &find_family(*id) : nullptr;
}

const Family& find_family(ft::ModelFamily id) {
  for (const auto& f : families()) {
    if (f.id == id) return f;
  }
  throw Error(std::string("model family ") + name_of(id) + " has no entry in model::families()");
}

std::string families_text() {
  std::string s;
  for (const auto& f : families()) s += (s.empty() ? "" : ", ") + std::string(f.model_type) + " (" + f.releases + ")";
  return s;
}

ModelArgs args_from_config(const ft::ModelConfig& cfg, int64_t vocab_size) {
  using ft::ModelFamily;
  const ModelFamily family = cfg.architecture;
  ModelArgs a;
  a.model_type = find_family(family).model_type;
  a.vocab_size = cfg.vocab_size > 0 ? cfg.vocab_size : vocab_size;
  if (a.vocab_size <= 0)
    throw ConfigError("model.vocab_size: unknown vocabulary size", "set model.vocab_size or a tokenizer");
  a.hidden_size = cfg.hidden_size;
  a.intermediate_size = cfg.intermediate_size;
  a.num_layers = cfg.num_layers;
  a.num_heads = cfg.num_heads;
  a.num_kv_heads = cfg.num_kv_heads;
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 ||
      a.hidden_size % a.num_heads != 0) {
    throw ConfigError(
        "model.num_heads/num_kv_heads/hidden_size: num_heads must divide hidden_size and be a multiple "
        "of num_kv_heads");
  }
  a.head_dim = a.hidden_size / a.num_heads;
  a.max_position_embeddings = cfg.max_position_embeddings;
  a.rope_theta = cfg.rope_theta;
  a.rms_norm_eps = cfg.rms_norm_eps;
  a.tie_word_embeddings = cfg.tie_embeddings;
  a.attention_bias = family == ModelFamily::kQwen2;
  a.qk_norm = family == ModelFamily::kQwen3 || family == ModelFamily::kGemma3Text || family == ModelFamily::kQwen3Moe;
  if (family == ModelFamily::kQwen3Moe || family == ModelFamily::kMixtral) {  // every layer MoE
    a.num_experts = cfg.num_experts;
    a.num_experts_per_tok = cfg.num_experts_per_tok;
    const bool own_width = family == ModelFamily::kQwen3Moe && cfg.moe_intermediate_size > 0;
    a.moe_intermediate_size = own_width ? cfg.moe_intermediate_size : cfg.intermediate_size;
    a.norm_topk_prob = family == ModelFamily::kMixtral;
  }
  a.fused_projections = family == ModelFamily::kPhi3;
  if (family == ModelFamily::kGemma2 || family == ModelFamily::kGemma3Text) {
    // The Gemma block with full attention in every layer, no soft-capping, the usual 1/sqrt(head_dim) scale.
    a.gemma = true;
    a.hidden_act = "gelu_pytorch_tanh";
    a.query_pre_attn_scalar = static_cast<double>(a.head_dim);
    a.sliding_layers.assign(static_cast<size_t>(a.num_layers), false);
    a.sliding_window = a.max_position_embeddings;  // unused by full layers, but transformers' Gemma2 wants one
    if (family == ModelFamily::kGemma3Text) a.local_rope_theta = a.rope_theta;
  }
  a.torch_dtype = dtype_name(dtype_from_name(name_of(cfg.dtype)));
  return a;
}

}  // namespace ft::model

// Model hyperparameters, read from and written to Hugging Face config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <vector>

#include "config/config.h"

namespace ft::model {

struct RopeScaling {
  std::string type = "default";                     // default | linear | llama3 | longrope | yarn (others refused)
  double factor = 1.0;                              // linear, llama3, yarn: context extension factor
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, longrope, yarn: the pre-extension context
  std::vector<double> short_factor;                 // longrope: per rotated pair, positions < the original context
  std::vector<double> long_factor;                  // longrope: per rotated pair, sequences beyond it
  std::optional<double> longrope_factor;            // longrope: "factor" as config.json gave it (else max/original)
  std::optional<double> attention_factor;           // longrope, yarn: the cos/sin scale config.json gave (else derived)
  double beta_fast = 32.0, beta_slow = 1.0;         // yarn: the rotation counts that bound the interpolation ramp
  bool truncate = true;                             // yarn: the ramp's bounds rounded to whole pairs
  std::optional<double> mscale, mscale_all_dim;     // yarn (DeepSeek): the derived attention factor's ratio
};

struct ModelArgs {
  // llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3_text | qwen3_moe | mixtral
  std::string model_type = "llama";
  // "gemma3" when config.json is a multimodal checkpoint's (Gemma 3 4B/12B/27B, Gemma3ForConditionalGeneration) and
  // the model is its language model: text_config, weights under language_model. (model/checkpoint_names.h); its
  // vision tower and projector are read and written back unchanged. Empty otherwise.
  std::string multimodal_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_heads unless config.json says otherwise
  int64_t max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and, for llama's attention_bias, o) projection biases; qwen2: q/k/v only
  bool o_proj_bias = false;     // llama attention_bias also adds an o_proj bias
  bool mlp_bias = false;        // llama mlp_bias: gate/up/down biases
  bool qk_norm = false;         // qwen3: RMSNorm over each head of q and k (q_norm, k_norm) before RoPE
  // phi3: one qkv_proj [(H + 2 Hkv) D, hidden] (q, k, v rows in that order) and one gate_up_proj [2 I, hidden]
  // (gate rows first) instead of q/k/v_proj and gate/up_proj, as the checkpoint stores them.
  bool fused_projections = false;
  double partial_rotary_factor = 1.0;     // phi3 (Phi-4-mini: 0.75): RoPE turns the first head_dim * factor dims
  std::optional<int64_t> sliding_window;  // mistral, phi3, gemma: keys further back than this are masked out
  // gemma: which layers the window applies to (true = "sliding_attention"); empty = every layer when it is set.
  std::vector<bool> sliding_layers;
  // gemma3_text: the rope base of the sliding layers (default rope); the others use rope_theta and rope_scaling.
  std::optional<double> local_rope_theta;
  // Gemma 2 / 3: RMSNorm scales by (1 + weight) in F32 (weights start at zero); the embedding is multiplied by
  // sqrt(hidden_size) in its dtype; each layer norms the attention and MLP outputs too (post_attention_layernorm
  // on the attention output, pre_feedforward_layernorm before the MLP, post_feedforward_layernorm after it).
  bool gemma = false;
  std::string hidden_act = "silu";                // silu (SwiGLU) | gelu_pytorch_tanh (GeGLU, gemma)
  std::optional<double> query_pre_attn_scalar;    // gemma: attention scores scale by its -1/2 power, not head_dim's
  std::optional<double> attn_logit_softcapping;   // gemma2: scores = cap * tanh(scores / cap) before the mask
  std::optional<double> final_logit_softcapping;  // gemma2: logits = cap * tanh(logits / cap)
  // Mixture of experts (qwen3_moe, mixtral; num_experts > 0): transformers' *SparseMoeBlock in place of the MLP
  // in the layers moe_layer() names. The router takes the softmax of its logits over all experts, keeps the top
  // num_experts_per_tok, and (norm_topk_prob; mixtral always) rescales them to sum to 1.
  int64_t num_experts = 0;               // config.json: num_experts (qwen3_moe) / num_local_experts (mixtral)
  int64_t num_experts_per_tok = 0;       // experts each token is routed to
  int64_t moe_intermediate_size = 0;     // each expert's SwiGLU width (mixtral: intermediate_size)
  bool norm_topk_prob = false;           // renormalise the top-k probabilities
  int64_t decoder_sparse_step = 1;       // qwen3_moe: layer i is MoE when (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;  // qwen3_moe: ... and i is not listed here (those keep the dense MLP)
  double router_aux_loss_coef = 0.001;   // the load-balancing loss's weight in the training loss
  bool output_router_logits = false;     // transformers adds that loss only when this is on
  double router_jitter_noise = 0.0;      // mixtral, training: the block's input times U(1 - j, 1 + j)
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;  // the first id when config.json lists several
  std::vector<int64_t> eos_token_ids;   // every EOS id config.json lists
  std::optional<int64_t> pad_token_id;
  std::string torch_dtype = "float32";  // float32 | bfloat16 | float16: dtype of the stored weights
  std::string raw_config_json;          // config.json as loaded ("" when built from scratch); unknown keys survive

  // The dims of each head that RoPE rotates (transformers: int(head_dim * partial_rotary_factor)).
  int64_t rotary_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor); }
  // Whether layer `i` routes its tokens to experts instead of running the dense MLP.
  bool moe_layer(int64_t i) const {
    if (num_experts <= 0) return false;
    for (int64_t j : mlp_only_layers) {
      if (j == i) return false;
    }
    return decoder_sparse_step > 0 && (i + 1) % decoder_sparse_step == 0;
  }
  // Whether layer `i` masks keys beyond sliding_window.
  bool layer_slides(int64_t i) const {
    return sliding_window.has_value() &&
           (sliding_layers.empty() || (i < static_cast<int64_t>(sliding_layers.size()) && sliding_layers[i]));
  }
};

// A model family this build implements: config.json's model_type, transformers' class, the releases it covers.
struct Family {
  ft::ModelFamily id;        // model.architecture's value for it
  const char* model_type;    // name_of(id)
  const char* architecture;  // transformers' class
  const char* releases;
};
// Every supported family, one per ModelFamily in its order (the order `finetune info` lists them).
const std::vector<Family>& families();
// The family of `model_type`, or nullptr.
const Family* find_family(const std::string& model_type);
const Family& find_family(ft::ModelFamily id);
// "llama (Llama 2/3/3.x), mistral (...), ...": for error hints and `finetune info`.
std::string families_text();

// Reads <model_dir>/config.json. Accepts both the transformers 4 layout (rope_theta, rope_scaling) and the 5 layout
// (rope_parameters). Throws ft::ConfigError naming the file and field for a missing field or an unsupported
// model_type, architecture, activation or rope type.
ModelArgs load_hf_config(const std::filesystem::path& model_dir);
// Parses config.json text; `source` names it in errors.
ModelArgs parse_hf_config(const std::string& json_text, const std::string& source);

// `a` of a multimodal checkpoint as its language model alone, saved as its family's own *ForCausalLM config (the
// text_config): for a model without the checkpoint's other parts (model.random_weights draws no vision tower).
ModelArgs language_model_only(ModelArgs a);

// Writes config.json that transformers' from_pretrained reads (keys of the loaded file are kept, ours override).
void save_hf_config(const ModelArgs& args, const std::filesystem::path& path);

// Writes generation_config.json with the special-token ids of `args`, which transformers' generate() stops and pads
// with (a model directory without one, and a config.json without EOS, generates up to max_new_tokens).
void save_generation_config(const ModelArgs& args, const std::filesystem::path& path);

// Fills the special-token ids that `args` (config.json) lacks from the tokenizer's (negative: none), so a saved
// model names the EOS its tokenizer appends in training.
void fill_special_token_ids(ModelArgs& args, int64_t bos_id, int64_t eos_id, int64_t pad_id);

// From-scratch training: model dims from the YAML config.
ModelArgs args_from_config(const ft::ModelConfig& cfg, int64_t vocab_size);

// "float32" etc. <-> scalar type.
at::ScalarType dtype_from_name(const std::string& name);
std::string dtype_name(at::ScalarType type);

}  // namespace ft::model

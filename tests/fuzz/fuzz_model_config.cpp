// A model directory's config.json (mode 0: parsed, and what parses is saved and read back as export does), and a
// LoRA adapter's adapter_config.json (mode 1) or adapter_model.safetensors (mode 2), checked against the base and
// loaded into a small model built from the base's config.json.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "fuzz_support.h"
#include "model/adapter_check.h"
#include "model/args.h"
#include "model/lora.h"

namespace ft::fuzz {
namespace {

namespace fs = std::filesystem;

const char* const kBaseConfig = R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
  "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "float32"})";

model::ModelArgs base_args;
std::string valid_adapter_config, valid_adapter_weights;

fs::path base_dir() {
  return scratch() / "base";
}
fs::path adapter_dir() {
  return scratch() / "adapter";
}

}  // namespace

void target_setup() {
  at::set_num_threads(1);
  fs::create_directories(base_dir());
  write_bytes(base_dir() / "config.json", kBaseConfig);
  base_args = model::parse_hf_config(kBaseConfig, "config.json");
  const auto m = std::make_shared<model::Transformer>(base_args);
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = 2;
  lora.targets = model::lora_target_names(m->args());
  model::apply_lora(*m, lora, 0);
  model::save_adapter(*m, lora, adapter_dir(), base_dir().string());
  valid_adapter_config = read_bytes(adapter_dir() / "adapter_config.json");
  valid_adapter_weights = read_bytes(adapter_dir() / "adapter_model.safetensors");
}

std::vector<std::string> seeds() {
  return {with_mode(0, kBaseConfig),
          with_mode(0, R"({"model_type": "qwen2", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 128,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true, "use_sliding_window": false})"),
          with_mode(0, R"({"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
            "max_position_embeddings": 8192, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}})"),
          with_mode(0, R"({"model_type": "qwen3", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "max_position_embeddings": 64})"),
          with_mode(0, R"({"model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm_topk_prob": true, "decoder_sparse_step": 1,
            "mlp_only_layers": [1], "router_aux_loss_coef": 0.001, "output_router_logits": false})"),
          with_mode(0, R"({"model_type": "mixtral", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
            "num_experts_per_tok": 2, "router_jitter_noise": 0.01, "sliding_window": null})"),
          with_mode(1, valid_adapter_config),
          with_mode(2, valid_adapter_weights)};
}

}  // namespace ft::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ft;
  const auto input = fuzz::split_mode(data, size);
  switch (input.mode % 3) {
    case 0: {
      model::ModelArgs args;
      if (!fuzz::accepted([&] { args = model::parse_hf_config(std::string(input.payload), "config.json"); })) break;
      const auto dir = fuzz::scratch() / "saved";
      std::filesystem::create_directories(dir);
      model::save_hf_config(args, dir / "config.json");
      // What export writes must load back.
      if (!fuzz::accepted([&] { model::load_hf_config(dir); })) __builtin_trap();
      break;
    }
    default: {
      const bool config = input.mode % 3 == 1;
      fuzz::write_bytes(fuzz::adapter_dir() / "adapter_config.json",
                        config ? input.payload : fuzz::valid_adapter_config);
      fuzz::write_bytes(fuzz::adapter_dir() / "adapter_model.safetensors",
                        config ? fuzz::valid_adapter_weights : input.payload);
      fuzz::accepted([&] {
        model::check_adapter_base(fuzz::adapter_dir(), fuzz::base_dir(), /*force=*/false);
        const auto m = std::make_shared<model::Transformer>(fuzz::base_args);
        model::load_adapter(*m, fuzz::adapter_dir());
      });
    }
  }
  return 0;
}

// Whether a LoRA adapter belongs to the base model it is applied to (`finetune export`, `generate --adapter`).
#pragma once

#include <filesystem>

namespace ft::model {

// Compares the base model named by `adapter_dir`/adapter_config.json (base_model_name_or_path, when it is a
// directory with a config.json) with `base_dir`'s config.json: architecture, vocabulary, hidden and intermediate
// sizes, layer and head counts, head_dim, RoPE settings, norm epsilon and tied embeddings. A difference throws
// ft::ConfigError (exit 2) naming both directories and every differing field, unless `force`, which logs a warning
// instead. An adapter whose base is a hub id or no longer exists passes: its tensors' shapes are checked when it is
// loaded (load_adapter).
void check_adapter_base(const std::filesystem::path& adapter_dir, const std::filesystem::path& base_dir, bool force);

}  // namespace ft::model

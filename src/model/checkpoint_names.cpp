#include "model/checkpoint_names.h"

namespace ft::model {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "model.layers.N.mlp." of an MoE parameter name, and the stored block prefix (mixtral: block_sparse_moe).
std::string stored_block(const std::string& layer_prefix, const ModelArgs& args) {
  return args.model_type == "mixtral" ? layer_prefix + "block_sparse_moe." : layer_prefix + "mlp.";
}

// The per-expert names of one projection: <block>experts.E.<proj>.weight for E in 0..num_experts-1.
std::vector<std::string> per_expert(const std::string& block, const std::string& proj, const ModelArgs& args) {
  std::vector<std::string> names;
  for (int64_t e = 0; e < args.num_experts; ++e) {
    names.push_back(block + "experts." + std::to_string(e) + "." + proj + ".weight");
  }
  return names;
}

bool starts_with(const std::string& s, const std::string& head) {
  return s.compare(0, head.size(), head) == 0;
}

// A multimodal checkpoint's language model: the prefix of its stored tensors (before model.* and lm_head.weight) and
// of its modules in transformers' memory (in place of model.).
const std::string kStoredLanguageModel = "language_model.";
const std::string kLanguageModelModule = "model.language_model.";

// Where a multimodal checkpoint stores the language model's tensor `name` (model.* or lm_head.weight).
std::string stored_name(const std::string& name, const ModelArgs& args) {
  return args.multimodal_type.empty() ? name : kStoredLanguageModel + name;
}

// The MoE parameters' per-expert parts, else {{name}}.
std::vector<std::vector<std::string>> expert_parts(const std::string& name, const ModelArgs& args) {
  const bool mixtral = args.model_type == "mixtral";
  for (const char* tail : {"mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.gate.weight"}) {
    if (args.num_experts <= 0 || !ends_with(name, tail)) continue;
    const std::string block = stored_block(name.substr(0, name.size() - std::string(tail).size()), args);
    const std::string t = tail;
    if (t == "mlp.gate.weight") return {{block + "gate.weight"}};
    if (t == "mlp.experts.down_proj") return {per_expert(block, mixtral ? "w2" : "down_proj", args)};
    return {per_expert(block, mixtral ? "w1" : "gate_proj", args), per_expert(block, mixtral ? "w3" : "up_proj", args)};
  }
  return {{name}};
}

}  // namespace

std::vector<std::vector<std::string>> stored_parts(const std::string& name, const ModelArgs& args) {
  auto groups = expert_parts(name, args);
  for (auto& group : groups) {
    for (auto& part : group) part = stored_name(part, args);
  }
  return groups;
}

std::string released_name(const std::string& name, const ModelArgs& args) {
  if (args.multimodal_type.empty()) return name;
  if (name == "lm_head.weight") return kStoredLanguageModel + name;
  if (starts_with(name, kLanguageModelModule)) {
    return kStoredLanguageModel + "model." + name.substr(kLanguageModelModule.size());
  }
  for (const std::string part : {"model.vision_tower.", "model.multi_modal_projector."}) {
    if (starts_with(name, part)) return name.substr(6);  // without "model."
  }
  return name;
}

bool passes_through(const std::string& name, const ModelArgs& args) {
  return !args.multimodal_type.empty() &&
         (starts_with(name, "vision_tower.") || starts_with(name, "multi_modal_projector."));
}

std::string transformers_module_path(const std::string& path, const ModelArgs& args) {
  if (args.multimodal_type.empty() || !starts_with(path, "model.")) return path;
  return kLanguageModelModule + path.substr(6);
}

std::string module_path_from_transformers(const std::string& path, const ModelArgs& args) {
  if (args.multimodal_type.empty() || !starts_with(path, kLanguageModelModule)) return path;
  return "model." + path.substr(kLanguageModelModule.size());
}

std::string adapter_key_from_transformers4(const std::string& key, const ModelArgs& args) {
  const std::string peft = "base_model.model.";
  if (args.multimodal_type.empty() || !starts_with(key, peft)) return key;
  const std::string rest = key.substr(peft.size());
  const std::string language_model = kStoredLanguageModel + "model.";
  if (starts_with(rest, language_model)) return peft + kLanguageModelModule + rest.substr(language_model.size());
  if (starts_with(rest, kStoredLanguageModel + "lm_head.")) return peft + rest.substr(kStoredLanguageModel.size());
  for (const std::string part : {"vision_tower.", "multi_modal_projector."}) {
    if (starts_with(rest, part)) return peft + "model." + rest;
  }
  return key;
}

std::vector<std::pair<std::string, at::Tensor>> split_for_checkpoint(const std::string& name, const at::Tensor& value,
                                                                     const ModelArgs& args) {
  const auto groups = stored_parts(name, args);
  if (value.dim() != 3) return {{groups[0][0], value}};  // not an experts' weight: at most renamed
  std::vector<std::pair<std::string, at::Tensor>> out;
  const int64_t width = value.size(1) / static_cast<int64_t>(groups.size());  // gate_up_proj: I rows each
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t e = 0; e < groups[g].size(); ++e) {
      out.emplace_back(groups[g][e], value[static_cast<int64_t>(e)].narrow(0, static_cast<int64_t>(g) * width, width));
    }
  }
  return out;
}

}  // namespace ft::model

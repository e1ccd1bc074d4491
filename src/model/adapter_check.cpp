#include "model/adapter_check.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "util/error.h"
#include "util/fmt.h"
#include "util/fs.h"

namespace ft::model {
namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
  try {
    return nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace

void check_adapter_base(const std::filesystem::path& adapter_dir, const std::filesystem::path& base_dir, bool force) {
  const auto adapter_config_path = adapter_dir / "adapter_config.json";
  if (!std::filesystem::exists(adapter_config_path)) return;  // load_adapter reports it
  const auto adapter_config = read_json(adapter_config_path);
  if (!adapter_config.contains("base_model_name_or_path") ||
      !adapter_config.at("base_model_name_or_path").is_string()) {
    return;
  }
  const std::filesystem::path trained_on = adapter_config.at("base_model_name_or_path").get<std::string>();
  std::error_code ec;
  if (trained_on.empty() || !std::filesystem::exists(trained_on / "config.json", ec) ||
      std::filesystem::equivalent(trained_on, base_dir, ec)) {
    return;
  }
  const auto theirs = read_json(trained_on / "config.json");
  const auto ours = read_json(base_dir / "config.json");
  // rope_theta sits at the top level in transformers 4 configs and in rope_parameters in transformers 5.
  static const char* const kFields[] = {"model_type",
                                        "vocab_size",
                                        "hidden_size",
                                        "intermediate_size",
                                        "num_hidden_layers",
                                        "num_attention_heads",
                                        "num_key_value_heads",
                                        "head_dim",
                                        "rope_theta",
                                        "rope_parameters",
                                        "rope_scaling",
                                        "rms_norm_eps",
                                        "tie_word_embeddings",
                                        "partial_rotary_factor",
                                        "original_max_position_embeddings"};
  std::vector<std::string> differ;
  // The fields at the top and, in a multimodal checkpoint's config, in its language model's text_config.
  const auto compare = [&](const nlohmann::json& a_obj, const nlohmann::json& b_obj, const std::string& prefix) {
    for (const char* field : kFields) {
      const auto a = a_obj.contains(field) ? a_obj.at(field) : nlohmann::json();
      const auto b = b_obj.contains(field) ? b_obj.at(field) : nlohmann::json();
      if (a != b)
        differ.push_back(prefix + field + " " + (a.is_null() ? "absent" : a.dump()) + " vs " +
                         (b.is_null() ? "absent" : b.dump()));
    }
  };
  compare(theirs, ours, "");
  const auto text_config = [](const nlohmann::json& j) {
    return j.contains("text_config") && j.at("text_config").is_object() ? j.at("text_config")
                                                                        : nlohmann::json::object();
  };
  compare(text_config(theirs), text_config(ours), "text_config.");
  if (differ.empty()) return;
  std::string list;
  for (const auto& d : differ) list += (list.empty() ? "" : ", ") + d;
  const std::string message = "the adapter " + adapter_dir.string() + " was trained on " + trained_on.string() +
                              ", whose config.json differs from " + (base_dir / "config.json").string() + ": " + list;
  if (force) {
    FT_LOG_WARN("{} (--force: applying it anyway)", message);
    return;
  }
  throw ConfigError(message, "pass the base model it was trained on as --model, or --force if this base is meant");
}

}  // namespace ft::model

#include "train/fingerprint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/resume_keys.h"

namespace ft::train {
namespace {

using nlohmann::json;

constexpr int kFormat = 2;

// A value as the refusal shows it: strings bare, anything else as JSON.
std::string shown(const json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// Two data source lists that differ at most in paths naming the same existing file.
bool same_sources(const json& a, const json& b) {
  if (!a.is_array() || !b.is_array() || a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    json sa = a[i];
    const json& sb = b[i];
    if (!sa.is_object() || !sb.is_object() || !sa.contains("path") || !sb.contains("path") || !sa["path"].is_string() ||
        !sb["path"].is_string()) {
      return false;
    }
    const std::string pa = sa["path"].get<std::string>(), pb = sb["path"].get<std::string>();
    std::error_code ec;
    if (pa != pb && std::filesystem::equivalent(pa, pb, ec) && !ec) sa["path"] = pb;  // the same file, two names
    if (sa != sb) return false;
  }
  return true;
}

// The current fingerprint in the layout of checkpoints written before the marks, to compare with one of them.
json legacy_layout(const json& current) {
  const json& m = current.at("model");
  const json& s = current.at("settings");
  json f;
  f["model"] = {m.at("model_type"),        m.at("vocab_size"), m.at("hidden_size"),
                m.at("intermediate_size"), m.at("num_layers"), m.at("num_heads"),
                m.at("num_kv_heads"),      m.at("head_dim"),   m.at("tie_word_embeddings")};
  f["lora"] = s.at("lora.enabled").get<bool>() ? json{s.at("lora.rank"), s.at("lora.targets")} : json();
  f["data"] = {s.at("data.seq_len"), s.at("data.packing"), s.at("data.template"), s.at("train.micro_batch_size"),
               s.at("train.grad_accum_steps")};
  json sources = json::array();
  for (const auto& source : s.at("data.train")) sources.push_back({source["path"], source["format"], source["weight"]});
  f["data_sources"] = sources;
  if (!s.at("tokenizer.add_tokens").empty()) f["add_tokens"] = s.at("tokenizer.add_tokens");
  if (s.at("train.objective") != "sft") f["objective"] = s.at("train.objective");
  return f;
}

std::vector<std::string> legacy_differences(json saved, const json& current) {
  json now = legacy_layout(current);
  if (saved.is_object() && saved.contains("data_sources") && saved["data_sources"].is_array() &&
      saved["data_sources"].size() == now["data_sources"].size()) {
    for (size_t i = 0; i < saved["data_sources"].size(); ++i) {  // [path, format, weight]
      json& source = saved["data_sources"][i];
      if (!source.is_array() || source.empty() || !source[0].is_string()) continue;
      std::error_code ec;
      const std::string pa = source[0].get<std::string>(), pb = now["data_sources"][i][0].get<std::string>();
      if (pa != pb && std::filesystem::equivalent(pa, pb, ec) && !ec) source[0] = pb;
    }
  }
  if (saved == now) return {};
  return {
      "the model or data shape (written by an earlier finetune, whose checkpoints do not name the keys: "
      "compare its config.yaml with this run's model, lora, tokenizer.add_tokens, data and batch settings)"};
}

}  // namespace

std::string make_fingerprint(const Config& config, const model::ModelArgs& args) {
  json f;
  f["format"] = kFormat;
  f["model"] = {{"model_type", args.model_type},
                {"vocab_size", args.vocab_size},
                {"hidden_size", args.hidden_size},
                {"intermediate_size", args.intermediate_size},
                {"num_layers", args.num_layers},
                {"num_heads", args.num_heads},
                {"num_kv_heads", args.num_kv_heads},
                {"head_dim", args.head_dim},
                {"tie_word_embeddings", args.tie_word_embeddings}};
  f["settings"] = config::must_match_values(config);
  return f.dump();
}

std::vector<std::string> fingerprint_differences(const std::string& saved_text, const std::string& current_text) {
  if (saved_text == current_text) return {};
  const json saved = json::parse(saved_text, nullptr, /*allow_exceptions=*/false);
  const json current = json::parse(current_text);
  if (saved.is_discarded() || !saved.is_object()) return {"the fingerprint in trainer_state.json is not JSON"};
  if (!saved.contains("format")) return legacy_differences(saved, current);
  std::vector<std::string> out;
  const json& saved_model = saved.value("model", json::object());
  for (const auto& [name, value] : current.at("model").items()) {
    if (saved_model.contains(name) && saved_model[name] != value) {
      out.push_back("model." + name + ": " + shown(saved_model[name]) + " -> " + shown(value));
    }
  }
  const json& saved_settings = saved.value("settings", json::object());
  for (const auto& [key, value] : current.at("settings").items()) {
    if (!saved_settings.contains(key)) continue;  // marked after the checkpoint was written
    const json& before = saved_settings[key];
    if (before == value || (key == "data.train" && same_sources(before, value))) continue;
    out.push_back(key + ": " + shown(before) + " -> " + shown(value));
  }
  if (out.empty() && saved.value("format", 0) != kFormat) {
    out.push_back("trainer_state.json's fingerprint has format " + saved["format"].dump() + ", this finetune writes " +
                  std::to_string(kFormat));
  }
  return out;
}

}  // namespace ft::train

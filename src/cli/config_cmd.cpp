// `finetune config show|validate --config FILE [key=value ...]`: print the resolved config, or check it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "config/loader.h"
#include "data/chat_template.h"
#include "data/templates.h"
#include "data/tokenizer.h"
#include "dist/env.h"
#include "train/build.h"
#include "util/device.h"
#include "util/fmt.h"

namespace ft::cli {
namespace {

struct ConfigOptions {
  std::string config;                  // YAML file
  std::vector<std::string> overrides;  // key=value, value parsed as YAML
};

CLI::App* add_action(CLI::App& parent, const char* name, const char* description, const char* example,
                     std::shared_ptr<ConfigOptions> options) {
  auto* sub = parent.add_subcommand(name, description);
  sub->footer(std::string("Example:\n  ") + example +
              "\nExit codes: 0 valid, 2 invalid config (every error listed as FILE:LINE:COL: KEY: problem).");
  sub->add_option("--config,-c", options->config, "YAML config file")->required();
  sub->add_option("overrides", options->overrides, "Config overrides key=value (value parsed as YAML)");
  return sub;
}

// The template chat data would be rendered with, parsed (auto) or checked against the tokenizer (built-in).
void check_chat_template(const Config& cfg, const data::Tokenizer& tokenizer) {
  const auto is_chat = [](const DataSource& s) { return s.format == SourceFormat::kChat; };
  if (std::none_of(cfg.data.train.begin(), cfg.data.train.end(), is_chat) &&
      std::none_of(cfg.data.eval.begin(), cfg.data.eval.end(), is_chat)) {
    return;
  }
  if (cfg.data.template_name != ChatTemplateName::kAuto) {
    const std::string configured = name_of(cfg.data.template_name);
    const std::string name = data::resolve_template(configured, tokenizer);  // mistral: its variant
    data::check_template_markers(name, tokenizer);
    std::cout << "chat template: built-in " << name
              << (name == configured ? "" : " (data.template " + configured + ")") << "\n";
    return;
  }
  auto source = data::find_chat_template(cfg.model.path);
  if (!source) source = data::find_chat_template(tokenizer.model_file().parent_path());
  if (!source) {
    std::cout << "chat template: plain (the model directory has none)\n";
    return;
  }
  const data::JinjaChat chat(*source, tokenizer);  // parses: an unsupported construct fails here, with its line
  std::cout << "chat template: the model's own, from " << source->origin.string() << "\n";
}

// data.seq_len within the model's max_position_embeddings (config.json of model.path).
void check_context_length(const Config& cfg) {
  if (cfg.model.path.empty()) return;
  const auto file = std::filesystem::path(cfg.model.path) / "config.json";
  std::ifstream in(file);
  if (!in) return;
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("max_position_embeddings") || !j["max_position_embeddings"].is_number_integer()) {
    return;
  }
  const auto limit = j["max_position_embeddings"].get<int64_t>();
  if (cfg.data.seq_len > limit) {  // a warning, as in training: a longer context can be intended
    std::cout << "warning: data.seq_len " << cfg.data.seq_len << " exceeds the model's max_position_embeddings "
              << limit << " (" << file.string() << "): positions past it were never trained\n";
  }
}

// The data files a run reads are not empty (their presence is a config check; data.synth may generate them).
void check_data_files(const Config& cfg) {
  namespace fs = std::filesystem;
  auto check = [&](const std::vector<DataSource>& sources, const char* split) {
    for (size_t i = 0; i < sources.size(); ++i) {
      const DataSource& s = sources[i];
      const std::string key = fmt::format("data.{}[{}].path", split, i);
      std::error_code ec;  // a missing file is reported by the config checks already
      if (s.path.empty() || !fs::is_regular_file(s.path, ec)) continue;
      if (fs::file_size(s.path, ec) == 0) throw ConfigError(key + ": the file is empty: " + s.path, "check the path");
    }
  };
  check(cfg.data.train, "train");
  check(cfg.data.eval, "eval");
}

// Settings that only a model built from scratch reads: with model.path set, config.json decides them.
const std::set<std::string>& from_scratch_keys() {
  static const std::set<std::string> keys = {
      "architecture", "vocab_size",   "hidden_size",    "intermediate_size",
      "num_layers",   "num_heads",    "num_kv_heads",   "max_position_embeddings",
      "rope_theta",   "rms_norm_eps", "tie_embeddings", "init_std"};
  return keys;
}

// `yaml` (to_yaml's output) with the from-scratch model keys marked as unused when model.path is set.
std::string mark_unused(const std::string& yaml, const Config& cfg) {
  if (cfg.model.path.empty()) return yaml;
  std::istringstream in(yaml);
  std::string out, line;
  bool in_model = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != ' ') in_model = line.rfind("model:", 0) == 0;
    const size_t colon = line.find(':');
    if (in_model && line.rfind("  ", 0) == 0 && line[2] != ' ' && colon != std::string::npos &&
        from_scratch_keys().count(line.substr(2, colon - 2)) > 0) {
      line += "  # unused: model.path is set, its config.json decides";
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace

void add_config(CLI::App& app, const Globals& /*globals*/, int& exit_code) {
  auto* config = app.add_subcommand("config", "Show or validate a configuration (composition, overrides, checks)");
  config->require_subcommand(1);
  config->footer(
      "Example:\n  finetune config show --config configs/demo.yaml train.max_steps=10\n"
      "  finetune config validate --config configs/demo.yaml");

  auto show_options = std::make_shared<ConfigOptions>();
  auto* show = add_action(*config, "show", "Print the fully resolved config as YAML (what a run would use)",
                          "finetune config show --config configs/demo.yaml optimizer.lr=1e-4 "
                          "'optimizer.betas=[0.9,0.95]'",
                          show_options);
  show->callback([show_options, &exit_code] {
    const auto loaded = config::load_config(show_options->config, show_options->overrides);
    std::cout << mark_unused(config::to_yaml(loaded.config), loaded.config);
    exit_code = 0;
  });

  auto validate_options = std::make_shared<ConfigOptions>();
  auto* validate =
      add_action(*config, "validate", "Check a config and list every error at once",
                 "finetune config validate --config configs/demo.yaml train.micro_batch_size=4", validate_options);
  validate->callback([validate_options, &exit_code] {
    // Throws ft::ConfigError listing every problem; main prints it and exits with code 2.
    const auto loaded = config::load_config(validate_options->config, validate_options->overrides);
    const auto& cfg = loaded.config;
    // Pre-flight without loading weights: the tokenizer, the chat template and the model's context length, so a
    // problem fails here with exit code 2 rather than after the model has loaded.
    if (cfg.tokenizer.train_vocab_size == 0) {
      const auto tokenizer = train::build_tokenizer(cfg);  // as training loads it, with tokenizer.add_tokens
      std::cout << "tokenizer: " << tokenizer->model_file().string() << " (" << tokenizer->kind() << ", "
                << tokenizer->vocab_size() << " tokens)\n";
      check_chat_template(cfg, *tokenizer);
    }
    check_context_length(cfg);
    check_data_files(cfg);
    const auto env = dist::read_env();
    const auto device = resolve_device(cfg.run.device, env.local_rank);  // a GPU that is not visible: exit 2
    std::cout << "device: " << device.str() << "\n";
    std::cout << "config OK\n";
    exit_code = 0;
  });
}

}  // namespace ft::cli

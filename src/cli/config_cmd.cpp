// `finetune config show|validate --config FILE [key=value ...]`: print the resolved config, or check it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/templates.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "config/loader.h"
#include "dist/env.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"
#include "train/build.h"
#include "util/fmt.h"

namespace ft::cli {
namespace {

struct ConfigOptions {
  std::string config;                  // YAML file
  std::vector<std::string> overrides;  // key=value, value parsed as YAML
};

CLI::App* add_action(CLI::App& parent, const char* name, const char* description, const char* example,
                     const char* exit_codes, std::shared_ptr<ConfigOptions> options) {
  auto* sub = parent.add_subcommand(name, description);
  sub->footer(std::string("Example:\n  ") + example + "\nExit codes: " + exit_codes);
  add_config_arguments(*sub, options->config, options->overrides);
  return sub;
}

// The template chat data would be rendered with, parsed (auto) or checked against the tokenizer (built-in).
void check_chat_template(const Config& cfg, const tok::Tokenizer& tokenizer) {
  const auto is_chat = [](const DataSource& s) { return s.format == SourceFormat::kChat; };
  if (std::none_of(cfg.data.train.begin(), cfg.data.train.end(), is_chat) &&
      std::none_of(cfg.data.eval.begin(), cfg.data.eval.end(), is_chat)) {
    return;
  }
  if (cfg.data.template_name != ChatTemplateName::kAuto) {
    const std::string configured = name_of(cfg.data.template_name);
    const std::string name = chat::resolve_template(configured, tokenizer);  // mistral: its variant
    chat::check_template_markers(name, tokenizer);
    std::cout << "chat template: built-in " << name
              << (name == configured ? "" : " (data.template " + configured + ")") << "\n";
    return;
  }
  auto source = chat::find_chat_template(cfg.model.path);
  if (!source) source = chat::find_chat_template(tokenizer.model_file().parent_path());
  if (!source) {
    std::cout << "chat template: plain (the model directory has none)\n";
    return;
  }
  const chat::JinjaChat chat(*source, tokenizer);  // parses: an unsupported construct fails here, with its line
  std::cout << "chat template: the model's own, from " << source->origin.string() << "\n";
}

// data.seq_len within the model's max_position_embeddings (config.json of model.path).
void check_context_length(const Config& cfg) {
  if (cfg.model.path.empty()) return;
  const auto file = std::filesystem::path(cfg.model.path) / "config.json";
  std::ifstream in(file);
  if (!in) return;
  const auto file_json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!file_json.is_object()) return;
  // A multimodal checkpoint (Gemma 3) holds its language model's settings in text_config.
  const bool nested = file_json.contains("text_config") && file_json["text_config"].is_object();
  const nlohmann::json& j = nested ? file_json["text_config"] : file_json;
  if (!j.contains("max_position_embeddings") || !j["max_position_embeddings"].is_number_integer()) return;
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

// `yaml` (to_yaml's output) with a comment after the line of each key in `notes` ("data.train[0].path" -> "...").
// The key of a line follows from the indentation: block maps two spaces deeper per level, "- " starting a list item.
std::string annotate(const std::string& yaml, const std::map<std::string, std::string>& notes) {
  std::istringstream in(yaml);
  std::string out, line;
  std::vector<std::pair<size_t, std::string>> open;  // (indentation, key path) of the enclosing keys and items
  std::map<std::string, int> items;                  // list path -> items seen
  while (std::getline(in, line)) {
    size_t indent = line.find_first_not_of(' ');
    std::string rest = indent == std::string::npos ? "" : line.substr(indent);
    while (!open.empty() && open.back().first >= indent) open.pop_back();
    if (rest.rfind("- ", 0) == 0 && !open.empty()) {  // an item of the list that the enclosing key holds
      const std::string item = open.back().second + "[" + std::to_string(items[open.back().second]++) + "]";
      open.emplace_back(indent, item);
      indent += 2;
      rest = rest.substr(2);
    }
    const size_t colon = rest.find(':');
    if (!rest.empty() && colon != std::string::npos && (colon + 1 == rest.size() || rest[colon + 1] == ' ')) {
      const std::string key = (open.empty() ? "" : open.back().second + ".") + rest.substr(0, colon);
      open.emplace_back(indent, key);
      const auto note = notes.find(key);
      if (note != notes.end()) line += "  # " + note->second;
    }
    out += line + "\n";
  }
  return out;
}

// What `config show` says beside the values: the from-scratch model keys that model.path makes unused, and what the
// validation refuses (the message at its key; with the key's line not printed, in the header only).
std::map<std::string, std::string> notes_of(const Config& cfg, const std::vector<config::Problem>& problems) {
  std::map<std::string, std::string> notes;
  if (!cfg.model.path.empty()) {
    for (const auto& key : from_scratch_keys())
      notes["model." + key] = "unused: model.path is set, its config.json decides";
  }
  for (const auto& p : problems) {
    std::string& note = notes[p.key];
    note += (note.empty() ? "" : "; ") + ("invalid: " + p.message);
  }
  return notes;
}

// Comment lines above the YAML listing what `config validate` and `train` would refuse, or "" for a valid config.
std::string problems_header(const std::vector<config::Problem>& problems) {
  if (problems.empty()) return "";
  std::string text =
      fmt::format("# Not a valid config yet: `finetune config validate` and `train` refuse it until {} fixed:\n",
                  problems.size() == 1 ? "this is" : fmt::format("these {} are", problems.size()));
  for (const auto& p : problems)
    text += "#   " + p.where + ": " + (p.key.empty() ? "" : p.key + ": ") + p.message + "\n";
  return text;
}

// LoRA's settings against the model's projections and experts, as training checks them once the model is loaded, on
// the model built without weights: its parameters are address space reserved and never touched (a 70B model's takes
// no memory, only 280 GB of addresses).
void check_lora(const Config& cfg) {
  if (!cfg.lora.enabled) return;
  const model::ModelArgs args = train::model_shape(cfg, /*vocab_size=*/0);  // LoRA has a model.path: its vocabulary
  std::unique_ptr<model::Transformer> unloaded;
  std::string unbuilt;  // why not: no room to reserve (vm.overcommit_memory=2, ulimit -v), which is no config error
  try {
    unloaded = std::make_unique<model::Transformer>(args);
  } catch (const c10::Error& e) {  // the CPU allocator's refusal
    unbuilt = e.what_without_backtrace();
  } catch (const std::bad_alloc&) {
    unbuilt = "out of host memory";
  }
  if (!unloaded) {
    std::cout << "lora: the targets are checked when train loads the model (building it here failed: "
              << unbuilt.substr(0, unbuilt.find('\n')) << ")\n";
    return;
  }
  model::check_lora_settings(*unloaded, cfg.lora);
  std::cout << fmt::format("lora: rank {} on {}\n", cfg.lora.rank,
                           fmt::join(model::resolve_lora_targets(cfg.lora.targets, args), ", "));
}

}  // namespace

void add_config(CLI::App& app, const Globals& /*globals*/, int& exit_code) {
  auto* config = app.add_subcommand("config", "Show or validate a configuration (composition, overrides, checks)");
  config->require_subcommand(1);
  config->footer(
      "Example:\n  finetune config show --config configs/demo.yaml train.max_steps=10\n"
      "  finetune config validate --config configs/demo.yaml");

  auto show_options = std::make_shared<ConfigOptions>();
  auto* show = add_action(*config, "show",
                          "Print the fully resolved config as YAML (what a run would use); an unfinished one is "
                          "printed too, with what validate would refuse marked",
                          "finetune config show --config configs/demo.yaml optimizer.lr=1e-4 "
                          "'optimizer.betas=[0.9,0.95]'",
                          "0 printed (an unfinished config too, what it lacks listed at the top and marked\n"
                          "'# invalid:'), 2 a config that cannot be read (YAML syntax, unknown key, wrong type, bad\n"
                          "override), every error listed as FILE:LINE:COL: KEY: problem.",
                          show_options);
  show->callback([show_options, &exit_code] {
    // An unfinished config (no data.train yet, say) still shows its defaults, with what is missing marked.
    std::vector<config::Problem> problems;
    const auto loaded = config::load_config_unvalidated(show_options->config, show_options->overrides, problems);
    std::cout << problems_header(problems)
              << annotate(config::to_yaml(loaded.config), notes_of(loaded.config, problems));
    if (!problems.empty()) {
      std::cerr << "finetune config show: " << problems.size() << " setting" << (problems.size() == 1 ? "" : "s")
                << " to fix before the config is valid (listed at the top and marked '# invalid:')\n";
    }
    exit_code = 0;
  });

  auto validate_options = std::make_shared<ConfigOptions>();
  auto* validate =
      add_action(*config, "validate", "Check a config and list every error at once",
                 "finetune config validate --config configs/demo.yaml train.micro_batch_size=4",
                 "0 valid, 2 invalid config (every error listed as FILE:LINE:COL: KEY: problem).", validate_options);
  validate->callback([validate_options, &exit_code] {
    // Throws ft::ConfigError listing every problem; main prints it and exits with code 2.
    const auto loaded = config::load_config(validate_options->config, validate_options->overrides);
    const auto& cfg = loaded.config;
    // Pre-flight without loading weights: the tokenizer, the chat template, the context length and LoRA targets, so a
    // problem fails here with exit code 2 rather than after the model has loaded.
    if (cfg.tokenizer.train_vocab_size == 0) {
      const auto tokenizer = train::build_tokenizer(cfg);  // as training loads it, with tokenizer.add_tokens
      std::cout << "tokenizer: " << tokenizer->model_file().string() << " (" << tokenizer->kind() << ", "
                << tokenizer->vocab_size() << " tokens)\n";
      check_chat_template(cfg, *tokenizer);
    }
    check_context_length(cfg);
    check_lora(cfg);
    check_data_files(cfg);
    const auto env = dist::read_env();
    const auto device = resolve_device(cfg.run.device, env.local_rank);  // a GPU that is not visible: exit 2
    std::cout << "device: " << device.str() << "\n";
    std::cout << "config OK\n";
    exit_code = 0;
  });
}

}  // namespace ft::cli

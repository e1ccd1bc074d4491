// `finetune config show|validate --config FILE [key=value ...]`: print the resolved config, or check it.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/loader.h"
#include "data/tokenizer.h"

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
    std::cout << config::to_yaml(loaded.config);
    exit_code = 0;
  });

  auto validate_options = std::make_shared<ConfigOptions>();
  auto* validate = add_action(*config, "validate", "Check a config and list every error at once",
                              "finetune config validate --config configs/demo.yaml train.micro_batch_size=4",
                              validate_options);
  validate->callback([validate_options, &exit_code] {
    // Throws ft::ConfigError listing every problem; main prints it and exits with code 2.
    const auto loaded = config::load_config(validate_options->config, validate_options->overrides);
    const auto& cfg = loaded.config;
    // The tokenizer loads now (not after the model): a wrong or malformed file fails here with exit code 2.
    if (cfg.tokenizer.train_vocab_size == 0) {
      const std::filesystem::path where = cfg.tokenizer.path.empty() ? cfg.model.path : cfg.tokenizer.path;
      const auto tokenizer = data::Tokenizer::load(where, cfg.model.path);
      std::cout << "tokenizer: " << tokenizer->model_file().string() << " (" << tokenizer->kind() << ", "
                << tokenizer->vocab_size() << " tokens)\n";
    }
    std::cout << "config OK\n";
    exit_code = 0;
  });
}

}  // namespace ft::cli

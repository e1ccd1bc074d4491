#include "cli/commands.h"

#include <sstream>
#include <stdexcept>

#include "util/error.h"

namespace ft::cli {

std::vector<int64_t> parse_ids(const std::string& text, const std::string& option) {
  std::string normalized = text;
  for (char& c : normalized) {
    if (c == ',') c = ' ';
  }
  std::vector<int64_t> ids;
  std::istringstream in(normalized);
  std::string tok;
  while (in >> tok) {
    try {
      size_t used = 0;
      ids.push_back(std::stoll(tok, &used));
      if (used != tok.size()) throw std::invalid_argument(tok);
    } catch (const std::exception&) {
      throw ConfigError(option + ": '" + tok + "' is not an integer", "give ids separated by spaces, e.g. \"1 2 3\"");
    }
  }
  if (ids.empty()) throw ConfigError(option + " is empty", "give at least one token id");
  return ids;
}

void refuse_existing_output(const std::filesystem::path& path, bool overwrite, const std::string& option) {
  std::error_code ec;
  if (overwrite || !std::filesystem::exists(path, ec)) return;
  throw ConfigError(option + ": " + path.string() + " exists already",
                    "add --overwrite to replace it, or choose another path");
}

namespace {

// `finetune --help train` asks for train's help: CLI11 shows it after this command's parse_complete_callback.
bool help_requested(const CLI::App& command) {
  for (const CLI::App* app = &command; app != nullptr; app = app->get_parent()) {
    const CLI::Option* help = app->get_help_ptr();
    if (help != nullptr && help->count() > 0) return true;
  }
  return false;
}

}  // namespace

void add_config_arguments(CLI::App& command, std::string& config, std::vector<std::string>& overrides) {
  command.add_option("--config,-c", config, "YAML config file (or give it as the first argument)");
  command.add_option("overrides", overrides, "Config overrides key=value (value parsed as YAML)");
  command.parse_complete_callback([&command, &config, &overrides, usage = command_path(&command)] {
    if (!config.empty() || help_requested(command)) return;
    if (!overrides.empty() && overrides.front().find('=') == std::string::npos) {
      config = overrides.front();
      overrides.erase(overrides.begin());
      return;
    }
    throw ConfigError(usage + " needs a config file", "give it as --config FILE or as the first argument, e.g. " +
                                                          usage + " --config configs/demo.yaml");
  });
}

void add_all(CLI::App& app, const Globals& globals, int& exit_code) {
  add_info(app, globals, exit_code);
  add_config(app, globals, exit_code);
  add_train(app, globals, exit_code);
  add_generate(app, globals, exit_code);
  add_export(app, globals, exit_code);
  add_tokenizer(app, globals, exit_code);
  add_data(app, globals, exit_code);
  add_plot(app, globals, exit_code);
  add_sweep(app, globals, exit_code);
}

}  // namespace ft::cli

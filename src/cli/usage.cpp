// Clearer errors for a command line that CLI11 refused (see commands.h, explain_usage_error): what CLI11 left
// unparsed, read against the command tree and the config's keys.
#include <algorithm>
#include <cctype>

#include "cli/commands.h"
#include "config/loader.h"
#include "util/error.h"

namespace ft::cli {

std::string command_path(const CLI::App* cmd) {
  std::string path;
  for (; cmd->get_parent() != nullptr; cmd = cmd->get_parent()) path = " " + cmd->get_name() + path;
  return "finetune" + path;
}

namespace {

bool is_option(const std::string& word) {
  return word.size() > 1 && word[0] == '-';
}

std::vector<std::string> command_names(CLI::App* cmd) {
  std::vector<std::string> names;
  for (const CLI::App* sub : cmd->get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

// "a, b or c".
std::string one_of(const std::vector<std::string>& words) {
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  }
  return text;
}

// A command that `cmd` requires is missing or misspelled: the first word CLI11 left unparsed is the command.
ConfigError unknown_command(CLI::App* cmd, const std::vector<std::string>& unparsed) {
  const std::vector<std::string> names = command_names(cmd);
  const std::string path = command_path(cmd);
  const std::string hint = "`" + path + " --help` describes " + (cmd->get_parent() ? "its commands" : "the commands");
  const auto word = std::find_if(unparsed.begin(), unparsed.end(), [](const std::string& w) { return !is_option(w); });
  if (word == unparsed.end()) return ConfigError(path + " needs a command: " + one_of(names), hint);
  const std::string prefix = path.size() > 8 ? path.substr(9) + " " : "";  // "config " of "finetune config"
  const std::string near = config::suggest_key(*word, names);
  if (!near.empty()) {
    return ConfigError("unknown command '" + prefix + *word + "'; did you mean '" + prefix + near + "'?", hint);
  }
  return ConfigError(
      "unknown command '" + prefix + *word + "' (the commands of " + path + " are " + one_of(names) + ")", hint);
}

// The keys a `key=value` override can set: leaves of the schema, not sections nor list elements ("data.train[].path").
const std::vector<std::string>& settable_keys() {
  static const std::vector<std::string> keys = [] {
    const auto& all = config::known_keys();
    std::vector<std::string> out;
    for (const auto& k : all) {
      const bool section = std::any_of(all.begin(), all.end(), [&](const std::string& other) {
        return other.size() > k.size() && other.compare(0, k.size(), k) == 0 &&
               (other[k.size()] == '.' || other[k.size()] == '[');
      });
      if (!section && k.find("[]") == std::string::npos) out.push_back(k);
    }
    return out;
  }();
  return keys;
}

// The config keys an option names in flag form: "--max-steps" and "--train.max-steps" name train.max_steps, "--lr"
// optimizer.lr, "--path" every key whose last part is "path".
std::vector<std::string> keys_named_by(const std::string& option) {
  std::string name = option.substr(option.find_first_not_of('-'));
  std::replace(name.begin(), name.end(), '-', '_');
  std::vector<std::string> keys;
  for (const auto& k : settable_keys()) {
    if (k == name || k.substr(k.rfind('.') + 1) == name) keys.push_back(k);
  }
  if (keys.empty()) {  // a near miss ("--max-step") gets the nearest key
    const std::string near = config::suggest_key(name, settable_keys());
    if (!near.empty()) keys.push_back(near);
  }
  return keys;
}

// The value given with `token` ("--lr=1e-4", or "--lr 1e-4" in argv), as it would follow "key=".
std::string value_given(const std::string& token, const std::vector<std::string>& argv) {
  std::string value = "VALUE";
  if (token.find('=') != std::string::npos) {
    value = token.substr(token.find('=') + 1);
  } else {
    const auto at = std::find(argv.begin() + std::min<size_t>(argv.size(), 1), argv.end(), token);
    if (at != argv.end() && at + 1 != argv.end() &&
        !(is_option(at[1]) && !std::isdigit(static_cast<unsigned char>(at[1][1]))))
      value = at[1];
  }
  const bool plain = !value.empty() && value.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789._-+/:") == std::string::npos;
  return plain ? value : "'" + value + "'";
}

// An option CLI11 did not know: a misspelling of one the command has, or a config key that belongs in an override.
std::optional<ConfigError> unknown_option(CLI::App* cmd, const std::string& token,
                                          const std::vector<std::string>& argv) {
  const std::string option = token.substr(0, token.find('='));
  const std::string path = command_path(cmd);
  const std::string what = "unknown option '" + option + "' for " + path;
  const bool takes_overrides = cmd->get_option_no_throw("overrides") != nullptr;
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd->get_options()) {
    for (const auto& n : o->get_lnames()) names.push_back("--" + n);
  }
  // Exactly a config key first: `--lr` would otherwise be a near miss of a short option such as --n.
  if (takes_overrides && option.rfind("--", 0) == 0 && option.size() > 2) {
    std::vector<std::string> overrides;
    for (const auto& key : keys_named_by(option)) overrides.push_back(key + "=" + value_given(token, argv));
    if (!overrides.empty()) {
      return ConfigError(what + "; config settings are key=value overrides: " + one_of(overrides),
                         "e.g. " + path + " --config FILE " + overrides.front() +
                             " (`finetune config show --config FILE` prints every key)");
    }
  }
  if (option.size() >= 6) {  // "--" and 4 letters: shorter names are within 2 edits of too many others
    const std::string near = config::suggest_key(option, names);
    if (!near.empty())
      return ConfigError(what + "; did you mean " + near + "?", "`" + path + " --help` lists its options");
  }
  return std::nullopt;
}

}  // namespace

ConfigError explain_usage_error(CLI::App& app, const std::vector<std::string>& argv, const CLI::ParseError& error) {
  CLI::App* cmd = &app;  // the last command parsed
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().front();
  const std::vector<std::string> unparsed = app.remaining(/*recurse=*/true);
  const bool misspelled = std::any_of(unparsed.begin(), unparsed.end(), [](const auto& w) { return !is_option(w); });
  if (cmd->get_require_subcommand_min() > 0 &&
      (misspelled || dynamic_cast<const CLI::RequiredError*>(&error) != nullptr)) {
    return unknown_command(cmd, unparsed);
  }
  for (const auto& word : unparsed) {
    if (!is_option(word)) continue;
    if (auto better = unknown_option(cmd, word, argv)) return std::move(*better);
    break;
  }
  const std::string path = command_path(cmd);
  const std::string what = cmd->get_parent() == nullptr ? error.what() : path + ": " + error.what();
  return ConfigError(what, "`" + path + " --help` lists its arguments");
}

}  // namespace ft::cli

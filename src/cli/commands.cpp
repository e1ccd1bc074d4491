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

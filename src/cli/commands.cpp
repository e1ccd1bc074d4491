#include "cli/commands.h"

namespace ft::cli {

void add_all(CLI::App& app, const Globals& globals, int& exit_code) {
  add_info(app, globals, exit_code);
}

}  // namespace ft::cli

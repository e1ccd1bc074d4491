#include "cli/commands.h"

namespace ft::cli {

void add_all(CLI::App& app, const Globals& globals, int& exit_code) {
  add_info(app, globals, exit_code);
  add_config(app, globals, exit_code);
  add_train(app, globals, exit_code);
  add_generate(app, globals, exit_code);
  add_export(app, globals, exit_code);
  add_tokenizer(app, globals, exit_code);
  add_data(app, globals, exit_code);
  add_plot(app, globals, exit_code);
}

}  // namespace ft::cli

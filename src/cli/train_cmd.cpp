// Placeholder until the owning issue lands; replaced wholesale by the real command.
#include "cli/commands.h"

namespace ft::cli {

void add_train(CLI::App& /*app*/, const Globals& /*globals*/, int& /*exit_code*/) {}

}  // namespace ft::cli

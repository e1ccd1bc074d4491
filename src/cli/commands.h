// Subcommands of the `finetune` executable. Each add_* registers one subcommand on `app`; its callback runs
// the command and stores the process exit code in `exit_code`. Errors propagate as ft::Error to main().
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace ft::cli {

// Options that every subcommand accepts.
struct Globals {
  std::string log_level;  // empty = the config's logging.level (or info)
};

// Registers every subcommand below.
void add_all(CLI::App& app, const Globals& globals, int& exit_code);

void add_info(CLI::App& app, const Globals& globals, int& exit_code);

}  // namespace ft::cli

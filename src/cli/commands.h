// Subcommands of the `finetune` executable. Each add_* registers one subcommand on `app`; its callback runs
// the command and stores the process exit code in `exit_code`. Errors propagate as ft::Error to main().
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "util/error.h"

namespace ft::cli {

// Options that every subcommand accepts.
struct Globals {
  std::string log_level;          // empty = the config's logging.level (or info)
  std::vector<std::string> argv;  // the process's arguments, argv[0] first (the launcher re-executes them)
};

// Token ids written as "1 2 3" (or "1,2,3") on the command line; ConfigError naming `option` for a non-integer or
// an empty list.
std::vector<int64_t> parse_ids(const std::string& text, const std::string& option);

// "finetune", "finetune train", "finetune config show": the command as typed (usage.cpp).
std::string command_path(const CLI::App* cmd);

// After CLI11 refused the command line (`app` as far as it parsed it): a clearer error for a misspelled or missing
// command ("unknown command 'trian'; did you mean 'train'?", also for `config shwo`), an option that is a config key
// in flag form ("--max-steps 5": the override train.max_steps=5, the key found among the config's keys) or a near
// miss of the command's own options. Otherwise CLI11's own message, named after the command, with the hint to its
// --help. usage.cpp.
ConfigError explain_usage_error(CLI::App& app, const std::vector<std::string>& argv, const CLI::ParseError& error);

// The rule for a file a command would replace (as `train` refuses a directory that holds a run): refused with exit
// code 2 when `path` exists, unless `overwrite` (the command's --overwrite), so nothing made earlier is lost by
// accident.
void refuse_existing_output(const std::filesystem::path& path, bool overwrite, const std::string& option);

// Registers the config file and the key=value overrides of a command that reads a config: `--config FILE`, or the
// first positional argument when --config is absent and that argument is no key=value override (`finetune train
// my.yaml`, as axolotl and llamafactory-cli take it). Neither given: a ConfigError (exit code 2) once the command
// line is parsed. Both targets must outlive the parse (they sit in the command's options).
void add_config_arguments(CLI::App& command, std::string& config, std::vector<std::string>& overrides);

// Registers every subcommand below.
void add_all(CLI::App& app, const Globals& globals, int& exit_code);

void add_info(CLI::App& app, const Globals& globals, int& exit_code);       // info_cmd.cpp
void add_config(CLI::App& app, const Globals& globals, int& exit_code);     // config_cmd.cpp: config show|validate
void add_train(CLI::App& app, const Globals& globals, int& exit_code);      // train_cmd.cpp
void add_generate(CLI::App& app, const Globals& globals, int& exit_code);   // generate_cmd.cpp
void add_export(CLI::App& app, const Globals& globals, int& exit_code);     // export_cmd.cpp: merge LoRA, write HF
void add_tokenizer(CLI::App& app, const Globals& globals, int& exit_code);  // tokenizer_cmd.cpp: tokenizer train
void add_data(CLI::App& app, const Globals& globals, int& exit_code);       // data_cmd.cpp: data inspect|synth
void add_plot(CLI::App& app, const Globals& globals, int& exit_code);       // plot_cmd.cpp
void add_sweep(CLI::App& app, const Globals& globals, int& exit_code);      // sweep_cmd.cpp: experiment sweeps

}  // namespace ft::cli

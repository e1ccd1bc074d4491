// The `finetune` executable: parses the command line and reports errors; all work lives in ftcore.
#include <c10/util/Exception.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <new>

#include "cli/commands.h"
#include "util/build_info.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/log.h"

namespace {

int report(const std::string& message, const std::string& hint, ft::ExitCode code) {
  if (::isatty(STDERR_FILENO) == 1) std::cerr << "\r\033[K";  // replaces a progress bar left on the line
  std::cerr << "finetune: error: " << message << "\n";
  if (!hint.empty()) std::cerr << "finetune: hint: " << hint << "\n";
  // A run directory's train.log ends with the error that stopped the run, not with its last progress line.
  ft::log::write_to_files(ft::log::Level::kError, message + (hint.empty() ? "" : " (hint: " + hint + ")"));
  return static_cast<int>(code);
}

// What to do about a file-system error that no part turned into an ft::Error (creating a directory, a rename).
std::string filesystem_hint(const std::filesystem::filesystem_error& e) {
  const int err = e.code().value();
  if (err == ENOTDIR) {
    return "a path on the way is a file, not a directory: check run.output_dir, data.cache_dir, tokenizer.path "
           "and --out";
  }
  if (err == EACCES || err == EPERM || err == EROFS) {
    return "the path is not writable here (permissions, or a read-only file system): choose another place";
  }
  return ft::write_error_hint(err);
}

// c10::Error messages carry a C++ backtrace after the first lines; users get the message alone.
std::string torch_message(const c10::Error& e) {
  std::string msg = e.what_without_backtrace();
  return msg;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"finetune: fine-tune LLaMA-family language models with LibTorch (no Python at run time)"};
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version",
                       std::string("finetune ") + ft::build::kVersion + " (" + ft::build::kGitDescribe + ")");
  app.footer(
      "Examples:\n"
      "  finetune train --config configs/demo.yaml\n"
      "  finetune config show --config configs/demo.yaml train.max_steps=10\n"
      "Exit codes: 0 success, 1 failure, 2 usage or configuration error, 130 stopped by a signal.");
  ft::cli::Globals globals;
  globals.argv.assign(argv, argv + argc);
  app.add_option("--log-level", globals.log_level, "trace|debug|info|warn|error (default: logging.level)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  int exit_code = 0;
  ft::cli::add_all(app, globals, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {  // not --help or --version
      const auto usage = ft::cli::explain_usage_error(app, globals.argv, e);
      return report(usage.what(), usage.hint(), usage.code());
    }
    return app.exit(e);
  } catch (const ft::Error& e) {
    return report(e.what(), e.hint(), e.code());
  } catch (const c10::Error& e) {
    return report(torch_message(e), "this came from LibTorch; rerun with --log-level debug for context",
                  ft::ExitCode::kFailure);
  } catch (const std::filesystem::filesystem_error& e) {
    return report(e.what(), filesystem_hint(e), ft::ExitCode::kFailure);
  } catch (const std::bad_alloc&) {
    return report("out of host memory",
                  "a size is larger than this host holds: a count (data synth --n), model.* "
                  "dimensions or train.micro_batch_size x data.seq_len; lower it",
                  ft::ExitCode::kFailure);
  } catch (const std::exception& e) {
    return report(e.what(), "", ft::ExitCode::kFailure);
  }
  return exit_code;
}

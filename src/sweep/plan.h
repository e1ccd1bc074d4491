// A sweep made concrete: the base config, the sweep file and the command-line overrides turned into one resolved,
// validated config per trial, and the sweep directory. sweep.json in that directory records the trials so that
// `--status DIR` and the summary need nothing else.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "config/loader.h"
#include "sweep/spec.h"

namespace ft::sweep {

struct TrialPlan {
  Trial trial;
  std::vector<std::string> overrides;  // every key=value given to the loader, in order
  config::LoadedConfig loaded;         // the trial's resolved config (valid only after validation)
  std::filesystem::path dir;           // <sweep dir>/<name>
};

struct Plan {
  SweepSpec spec;
  std::filesystem::path base_config;
  std::vector<std::string> cli_overrides;
  std::filesystem::path dir;  // the sweep directory, absolute
  std::vector<TrialPlan> trials;
};

struct PlanOptions {
  std::filesystem::path base_config;
  std::filesystem::path sweep_file;
  std::vector<std::string> overrides;  // key=value from the command line, given to every trial
  std::string out_dir;                 // --out; empty = the sweep file's output_dir, else runs/<sweep file stem>
  bool validate = true;                // load and validate every trial's config (false: names and overrides only)
};

// Reads the sweep file, expands the trials and (when options.validate) loads every trial's config. Throws
// ft::ConfigError naming the sweep file's lines for a bad sweep file, and listing every invalid trial config with
// the trial's name (a value that came from the sweep file is shown with its line there).
Plan make_plan(const PlanOptions& options);

// What sweep.json records of a plan: enough to read a sweep directory without its files.
struct SweepRecord {
  std::string base_config;
  std::string sweep_file;
  std::vector<std::string> overrides;
  std::string metric;
  Mode mode = Mode::kMin;
  std::vector<std::string> keys;  // swept keys, the table's columns
  std::vector<Trial> trials;      // Assignment::where left empty
};

SweepRecord record_of(const Plan& plan);
// Writes <dir>/sweep.json atomically (several array tasks may write the same content at once).
void write_record(const std::filesystem::path& dir, const SweepRecord& record);
// Reads <dir>/sweep.json; throws ft::ConfigError when `dir` holds no sweep.
SweepRecord read_record(const std::filesystem::path& dir);

}  // namespace ft::sweep

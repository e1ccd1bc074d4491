// Loading the YAML configuration: composition (`defaults:`), command-line overrides, interpolation, binding into
// ft::Config and validation, with every problem reported at once as one ft::ConfigError. docs/configuration.md
// describes the rules for users.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/tree.h"

namespace ft::config {

// A configuration as loaded: the bound, validated values plus where they came from.
struct LoadedConfig {
  Config config;                               // every field resolved: interpolated, paths made absolute
  std::filesystem::path file;                  // the config file given on the command line
  std::vector<std::string> overrides;          // the `key=value` overrides, in the order given
  std::vector<std::filesystem::path> sources;  // every YAML file read, bases before the files including them
  std::map<std::string, Origin> locations;     // key path (e.g. "optimizer.lr", "data.train[0].path") -> where
                                               // its value was set (a file position, or an override)

  // Where `key` was set, for error messages about it; the config file's path when it kept its default.
  std::string where(const std::string& key) const;
};

// Loads `file`, applies `overrides` ("a.b.c=value", value parsed as YAML), interpolates, binds and validates.
// Throws ft::ConfigError listing every error, one per line as "FILE:LINE:COL: KEY: problem".
LoadedConfig load_config(const std::filesystem::path& file, const std::vector<std::string>& overrides);

// A value the validation refuses: its key, where it was set (FILE:LINE:COL, an override, or the config file when the
// key kept its default) and what is wrong.
struct Problem {
  std::string key, where, message;
};

// load_config() for looking at a config that is not finished yet (`config show`): composition, override, unknown-key,
// type and interpolation errors still throw, but what the validation finds (data.train missing, a value out of
// range, a file that does not exist) comes back in `problems`, in the order load_config() would list it, with the
// config as bound.
LoadedConfig load_config_unvalidated(const std::filesystem::path& file, const std::vector<std::string>& overrides,
                                     std::vector<Problem>& problems);

// The fully resolved config as YAML, sections and keys in visit() order; load_config() of it gives an equal Config.
std::string to_yaml(const Config& config);

// Writes to_yaml(loaded.config) to run_dir/config.yaml atomically (temporary file, then rename); creates run_dir.
// A config.yaml already there whose settings differ (a resumed run with changed values) is kept first as
// run_dir/config_history/N.yaml, N counting up from 1.
void write_resolved_config(const LoadedConfig& loaded, const std::filesystem::path& run_dir);

// The keys whose values differ between two configs printed by to_yaml (e.g. a checkpoint's config.yaml and this
// run's), as "key: OLD -> NEW" in key order; lists compare as a whole ("data.train: [...] -> [...]"). Throws
// ft::ConfigError when either is not YAML or expands (through aliases) to over 100,000 values.
std::vector<std::string> yaml_differences(const std::string& old_yaml, const std::string& new_yaml);

// Field-by-field equality (the structs declare no operator==).
bool equal(const Config& a, const Config& b);

// Every key path the schema knows, sections included, list elements as "data.train[].path".
const std::vector<std::string>& known_keys();

// The nearest of `candidates` to `key` ("" when none is close), for "did you mean ...?": by the whole dotted path or
// by its last segment (one point more in another section); list indices in `key` are ignored.
std::string suggest_key(const std::string& key, const std::vector<std::string>& candidates);

// The scalar rules of binding, shared by checks of values before they are loaded: an integer (digits and sign), and
// a finite number.
bool parse_int(const std::string& text, int64_t& out);
bool parse_double(const std::string& text, double& out);

}  // namespace ft::config

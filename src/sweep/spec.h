// The sweep file of `finetune sweep` (docs/sweeps.md): which config keys take which values (grid, list, random),
// how trials are named and ranked, and how many run at once. read_sweep_file() checks every key and value against
// the config schema and reports problems as "FILE:LINE:COL: KEY: problem"; expand() turns the file into the
// ordered list of trials.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ft::sweep {

// One value given to one config key.
struct Assignment {
  std::string key;      // dotted config key, e.g. "optimizer.lr"
  std::string yaml;     // the value as YAML text, for a `key=value` override ("1.0e-3", "[0.9, 0.95]", "\"a b\"")
  std::string display;  // the value as names and tables show it ("1.0e-3")
  std::string where;    // where the sweep file gave it: "FILE:LINE:COL"

  std::string override_text() const { return key + "=" + yaml; }
};

// A value drawn for `random:`.
struct RandomParam {
  enum class Kind { kUniform, kLogUniform, kChoice };
  std::string key;
  Kind kind = Kind::kUniform;
  bool integer = false;             // the key is an integer: draws are whole numbers in [low, high]
  double low = 0.0, high = 0.0;     // kUniform, kLogUniform
  std::vector<Assignment> choices;  // kChoice
  std::string where;
};

struct RandomSpec {
  int64_t samples = 0;  // 0 = no random section
  uint64_t seed = 0;
  std::vector<RandomParam> params;
  std::string where;
};

enum class Mode { kMin, kMax };

struct MedianStop {
  bool enabled = false;
  int64_t min_trials = 3;    // finished trials with a value at the step before a trial can be stopped
  int64_t warmup_steps = 0;  // no trial is stopped before this step
};

struct SweepSpec {
  std::filesystem::path file;  // the sweep file as given
  std::string name_pattern;    // e.g. "lr${optimizer.lr}-r${lora.rank}"; empty = derived from the values
  std::string name_where;      // where `name:` was written
  std::string output_dir;      // the sweep directory as written; empty = runs/<sweep file stem>
  std::string metric = "eval.loss";
  Mode mode = Mode::kMin;
  std::string metric_where;
  std::vector<Assignment> set;                // given to every trial
  std::vector<std::vector<Assignment>> grid;  // one axis per key, its values in order
  std::vector<std::vector<Assignment>> list;  // explicit override sets
  RandomSpec random;
  int64_t devices_per_trial = 1;
  int64_t max_parallel = 0;  // 0 = one trial per free device set (GPUs), one at a time on the CPU
  MedianStop median_stop;
  std::vector<std::string> swept_keys;  // keys of grid, list and random, in the order first written
};

// One trial of the sweep.
struct Trial {
  int index = 0;                   // 0-based position in the sweep's order (--index)
  std::string name;                // its directory under the sweep directory
  std::vector<Assignment> values;  // the swept keys it sets: grid, then list, then random
};

// Reads and checks `file`. Throws ft::ConfigError listing every problem, one per line as
// "FILE:LINE:COL: KEY: problem" (unknown keys with the nearest known one, empty grids, values of the wrong type).
SweepSpec read_sweep_file(const std::filesystem::path& file);

// The trials in order: the grid's points (the first key varies slowest) times the list's entries times the random
// samples; a missing section counts as one empty set. Names come from `name:` or from the values, made file-system
// safe. Throws ft::ConfigError when two trials get the same name or the same values.
std::vector<Trial> expand(const SweepSpec& spec);

// "eval.loss" and the others that the summary can rank by, with their natural mode.
const std::vector<std::pair<std::string, Mode>>& known_metrics();

// `text` with every character outside [A-Za-z0-9._+=-] replaced by '_', runs of '_' collapsed, no leading '.'
// or '-', at most 96 characters; "trial" for an empty result.
std::string safe_name(const std::string& text);

// `s` as a double-quoted YAML string.
std::string yaml_quote(const std::string& s);

}  // namespace ft::sweep

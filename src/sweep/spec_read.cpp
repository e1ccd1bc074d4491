// Reading the sweep file: the config schema as the sweep sees it, the top level and the checks of config keys and
// values (spec_sections.cpp reads the sections), read_sweep_file().
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <type_traits>

#include "config/config.h"
#include "config/loader.h"
#include "sweep/spec_internal.h"
#include "util/error.h"
#include "util/fmt.h"

namespace fs = std::filesystem;

namespace ft::sweep {
namespace {

using config::Node;
using config::Origin;
using detail::plain;
using detail::Problems;
using detail::Reader;
using detail::Type;

// ---------------------------------------------------------------------------------------------------------------
// The config schema as the sweep sees it: every key path with the type of its value.

class TypeCollector {
 public:
  TypeCollector(std::map<std::string, Type>& out, std::string prefix) : out_(out), prefix_(std::move(prefix)) {}

  template <class T>
  void operator()(const char* key, T& field, OnResume = OnResume::kMayChange) {
    const std::string path = prefix_ + key;
    if constexpr (std::is_same_v<T, bool>) {
      out_[path] = Type::kBool;
    } else if constexpr (std::is_same_v<T, int64_t>) {
      out_[path] = Type::kInt;
    } else if constexpr (std::is_same_v<T, double>) {
      out_[path] = Type::kDouble;
    } else if constexpr (std::is_same_v<T, std::string> || is_setting_v<T> || is_open_setting_v<T>) {
      out_[path] = Type::kString;  // an enum's name is checked by the config loader of each trial
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      out_[path] = Type::kStrings;
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      out_[path] = Type::kNumbers;
    } else if constexpr (std::is_same_v<T, std::vector<DataSource>>) {
      out_[path] = Type::kMaps;  // a list element's keys cannot be addressed by a dotted path
    } else if constexpr (std::is_same_v<T, std::vector<EvalPrompt>>) {
      out_[path] = Type::kPrompts;
    } else {
      out_[path] = Type::kSection;
      TypeCollector sub(out_, path + ".");
      field.visit(sub);
    }
  }

 private:
  std::map<std::string, Type>& out_;
  std::string prefix_;
};

const std::map<std::string, Type>& schema() {
  static const std::map<std::string, Type> types = [] {
    std::map<std::string, Type> out;
    Config c;
    TypeCollector collector(out, "");
    c.visit(collector);
    return out;
  }();
  return types;
}

}  // namespace

namespace detail {

const char* expected(Type t) {
  switch (t) {
    case Type::kBool:
      return "true or false";
    case Type::kInt:
      return "an integer";
    case Type::kDouble:
      return "a number";
    case Type::kString:
      return "a string";
    case Type::kStrings:
      return "a list of strings";
    case Type::kNumbers:
      return "a list of numbers";
    case Type::kMaps:
      return "a list of maps";
    case Type::kPrompts:
      return "a list of prompts (strings or lists of {role, content} turns)";
    case Type::kSection:
      return "a section";
  }
  return "?";
}

// The rules of the config loader's binding (config/bind.cpp), so that a value passing here binds there.
bool plain(const Node& n) {
  return n.kind == Node::Kind::kScalar && !n.quoted;
}

}  // namespace detail

namespace {

bool fits(const Node& n, Type t) {
  int64_t i = 0;
  double d = 0.0;
  switch (t) {
    case Type::kBool:
      return plain(n) && (n.scalar == "true" || n.scalar == "True" || n.scalar == "TRUE" || n.scalar == "false" ||
                          n.scalar == "False" || n.scalar == "FALSE");
    case Type::kInt:
      return plain(n) && config::parse_int(n.scalar, i);
    case Type::kDouble:
      return plain(n) && config::parse_double(n.scalar, d);
    case Type::kString:
      return n.kind == Node::Kind::kScalar || n.kind == Node::Kind::kNull;
    case Type::kStrings:
      if (n.kind == Node::Kind::kNull) return true;
      return n.kind == Node::Kind::kSeq &&
             std::all_of(n.seq.begin(), n.seq.end(), [](const Node& e) { return e.kind == Node::Kind::kScalar; });
    case Type::kNumbers:
      if (n.kind == Node::Kind::kNull) return true;
      return n.kind == Node::Kind::kSeq && std::all_of(n.seq.begin(), n.seq.end(), [&](const Node& e) {
               return plain(e) && config::parse_double(e.scalar, d);
             });
    case Type::kMaps:
      if (n.kind == Node::Kind::kNull) return true;
      return n.kind == Node::Kind::kSeq &&
             std::all_of(n.seq.begin(), n.seq.end(), [](const Node& e) { return e.kind == Node::Kind::kMap; });
    case Type::kPrompts:
      if (n.kind == Node::Kind::kNull) return true;
      return n.kind == Node::Kind::kSeq && std::all_of(n.seq.begin(), n.seq.end(), [](const Node& e) {
               return e.kind == Node::Kind::kScalar ||
                      (e.kind == Node::Kind::kSeq && std::all_of(e.seq.begin(), e.seq.end(), [](const Node& turn) {
                         return turn.kind == Node::Kind::kMap;
                       }));
             });
    case Type::kSection:
      return false;
  }
  return false;
}

}  // namespace

namespace detail {

// ---------------------------------------------------------------------------------------------------------------
// Reading the file.

void Problems::add(const Origin& origin, const std::string& key, const std::string& message) {
  items_.push_back({origin.line, origin.column, origin.where() + ": " + (key.empty() ? "" : key + ": ") + message});
}

void Problems::throw_if_any() const {
  if (items_.empty()) return;
  auto sorted = items_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Item& a, const Item& b) {
    return a.line != b.line ? a.line < b.line : a.column < b.column;
  });
  std::string msg = fmt::format("invalid sweep file ({} {}):", sorted.size(), sorted.size() == 1 ? "error" : "errors");
  for (const auto& item : sorted) msg += "\n  " + item.text;
  throw ConfigError(msg, "fix the listed keys; docs/sweeps.md describes the sweep file");
}

void Reader::read(const Node& root) {
  static const std::vector<std::string> kTopKeys = {
      "name",   "output_dir",        "metric",       "mode",       "set", "grid", "list",
      "random", "devices_per_trial", "max_parallel", "median_stop"};
  bool mode_given = false;
  for (const auto& e : root.map) {
    Node empty;  // a key with nothing after it: point at the key, not at the next line
    if (e.value.kind == Node::Kind::kNull) {
      empty.origin = e.key_origin;
      empty.origin.base_dir = e.value.origin.base_dir;
    }
    const Node& v = e.value.kind == Node::Kind::kNull ? empty : e.value;
    if (e.key == "name") {
      if (string_value(v, "name", spec_.name_pattern)) spec_.name_where = v.origin.where();
    } else if (e.key == "output_dir") {
      string_value(v, "output_dir", spec_.output_dir);
    } else if (e.key == "metric") {
      read_metric(v);
    } else if (e.key == "mode") {
      std::string mode;
      if (!string_value(v, "mode", mode)) continue;
      if (mode != "min" && mode != "max") {
        problems_.add(v.origin, "mode", "must be min or max (got " + v.describe() + ")");
        continue;
      }
      spec_.mode = mode == "min" ? Mode::kMin : Mode::kMax;
      mode_given = true;
    } else if (e.key == "set") {
      read_set(v);
    } else if (e.key == "grid") {
      read_grid(v);
    } else if (e.key == "list") {
      read_list(v);
    } else if (e.key == "random") {
      read_random(v);
    } else if (e.key == "devices_per_trial") {
      int_value(v, "devices_per_trial", 1, spec_.devices_per_trial);
    } else if (e.key == "max_parallel") {
      int_value(v, "max_parallel", 0, spec_.max_parallel);
    } else if (e.key == "median_stop") {
      read_median_stop(v);
    } else {
      const std::string near = config::suggest_key(e.key, kTopKeys);
      problems_.add(e.key_origin, e.key,
                    "unknown key" + (near.empty() ? std::string("") : "; did you mean " + near + "?") +
                        " (sweep files have " + join(kTopKeys) + ")");
    }
  }
  if (!mode_given) {
    for (const auto& [metric, mode] : known_metrics()) {
      if (metric == spec_.metric) spec_.mode = mode;
    }
  }
  if (spec_.grid.empty() && spec_.list.empty() && spec_.random.samples == 0 && !had_trial_section_) {
    Origin o;
    o.source = spec_.file.string();
    problems_.add(o, "", "the sweep names no trials: give grid:, list: or random:");
  }
}

std::string Reader::join(const std::vector<std::string>& words) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i) s += (i ? ", " : "") + words[i];
  return s;
}

bool Reader::string_value(const Node& v, const std::string& key, std::string& out) {
  if (v.kind != Node::Kind::kScalar) {
    problems_.add(v.origin, key, "wrong type (expected a string, got " + v.describe() + ")");
    return false;
  }
  out = v.scalar;
  return true;
}

bool Reader::int_value(const Node& v, const std::string& key, int64_t min, int64_t& out) {
  int64_t value = 0;
  if (!plain(v) || !config::parse_int(v.scalar, value)) {
    problems_.add(v.origin, key, "wrong type (expected an integer, got " + v.describe() + ")");
    return false;
  }
  if (value < min) {
    problems_.add(v.origin, key, fmt::format("must be at least {} (got {})", min, value));
    return false;
  }
  out = value;
  return true;
}

void Reader::read_metric(const Node& v) {
  if (!string_value(v, "metric", spec_.metric)) return;
  spec_.metric_where = v.origin.where();
  std::vector<std::string> names;
  for (const auto& [metric, mode] : known_metrics()) names.push_back(metric);
  if (std::find(names.begin(), names.end(), spec_.metric) != names.end()) return;
  const std::string near = config::suggest_key(spec_.metric, names);
  problems_.add(v.origin, "metric",
                "unknown metric '" + spec_.metric + "'" + (near.empty() ? "" : "; did you mean " + near + "?") +
                    " (known: " + join(names) + ")");
}

// A config key named in the sweep: known, not a section, not one the sweep sets itself, in one section only.
std::optional<Type> Reader::config_key(const std::string& key, const Origin& origin, const std::string& section) {
  const auto& types = schema();
  const std::string shown = section.empty() ? key : section + "." + key;
  const auto it = types.find(key);
  if (it == types.end()) {
    std::vector<std::string> leaves;
    for (const auto& [k, t] : types) {
      if (t != Type::kSection) leaves.push_back(k);
    }
    const std::string near = config::suggest_key(key, leaves);
    problems_.add(origin, shown,
                  "unknown config key '" + key + "'" + (near.empty() ? "" : "; did you mean " + near + "?"));
    return std::nullopt;
  }
  if (it->second == Type::kSection) {
    problems_.add(origin, shown, "'" + key + "' is a section; name a key inside it, e.g. " + first_key_of(key));
    return std::nullopt;
  }
  if (key == "run.output_dir" || key == "run.name" || key == "checkpoint.resume" || key == "run.overwrite") {
    problems_.add(origin, shown,
                  "set by the sweep for every trial (run.name and run.output_dir are the trial's name and "
                  "directory, checkpoint.resume is auto, run.overwrite is false); it cannot be swept");
    return std::nullopt;
  }
  const std::string owner = section == "list" ? "list" : section.substr(0, section.find('.'));
  const auto [pos, inserted] = owners_.emplace(key, std::make_pair(owner, origin.where()));
  if (!inserted && pos->second.first != owner) {
    problems_.add(origin, shown,
                  "already given by " + pos->second.first + " (" + pos->second.second +
                      "); a key belongs to one of set, grid, list and random");
    return std::nullopt;
  }
  if (owner != "set" && std::find(spec_.swept_keys.begin(), spec_.swept_keys.end(), key) == spec_.swept_keys.end()) {
    spec_.swept_keys.push_back(key);
  }
  return it->second;
}

std::string Reader::first_key_of(const std::string& section) {
  for (const auto& [k, t] : schema()) {
    if (k.rfind(section + ".", 0) == 0 && t != Type::kSection) return k;
  }
  return section + ".KEY";
}

bool Reader::typed_value(const Node& v, Type t, const std::string& shown) {
  if (fits(v, t)) return true;
  problems_.add(v.origin, shown, std::string("wrong type (expected ") + expected(t) + ", got " + v.describe() + ")");
  return false;
}

bool Reader::map_section(const Node& v, const std::string& key) {
  if (v.kind == Node::Kind::kMap && !v.map.empty()) return true;
  problems_.add(v.origin, key,
                v.kind == Node::Kind::kMap || v.kind == Node::Kind::kNull
                    ? "empty (give at least one config key)"
                    : "wrong type (expected a map of config keys, got " + v.describe() + ")");
  return false;
}

}  // namespace detail

SweepSpec read_sweep_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    throw ConfigError("sweep file '" + file.string() + "' not found",
                      "pass an existing YAML file with --sweep (configs/demo-sweep.yaml is an example)");
  }
  SweepSpec spec;
  spec.file = file;
  Problems problems;
  const fs::path base_dir = fs::absolute(file).parent_path().lexically_normal();
  Node root;
  try {
    root = config::load_yaml_file(file, base_dir);
  } catch (const YAML::ParserException& e) {
    problems.add(Origin{file.string(), e.mark.line + 1, e.mark.column + 1, {}}, "", config::yaml_syntax_error(e, file));
    problems.throw_if_any();
  } catch (const YAML::BadFile&) {
    throw ConfigError("cannot read the sweep file '" + file.string() + "'", "check its permissions");
  }
  if (root.kind != Node::Kind::kMap) {
    problems.add(root.origin.line > 0 ? root.origin : Origin{file.string(), 0, 0, {}}, "",
                 "the sweep file must be a map with grid:, list: or random: (got " + root.describe() + ")");
    problems.throw_if_any();
  }
  Reader(spec, problems, base_dir).read(root);
  problems.throw_if_any();
  return spec;
}

}  // namespace ft::sweep

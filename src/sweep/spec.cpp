#include "sweep/spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <type_traits>

#include "config/config.h"
#include "config/loader.h"
#include "config/tree.h"
#include "util/error.h"
#include "util/fmt.h"

namespace fs = std::filesystem;

namespace ft::sweep {
namespace {

using config::Node;
using config::Origin;

// ---------------------------------------------------------------------------------------------------------------
// The config schema as the sweep sees it: every key path with the type of its value.

enum class Type { kBool, kInt, kDouble, kString, kStrings, kNumbers, kMaps, kPrompts, kSection };

class TypeCollector {
 public:
  TypeCollector(std::map<std::string, Type>& out, std::string prefix) : out_(out), prefix_(std::move(prefix)) {}

  template <class T>
  void operator()(const char* key, T& field) {
    const std::string path = prefix_ + key;
    if constexpr (std::is_same_v<T, bool>) {
      out_[path] = Type::kBool;
    } else if constexpr (std::is_same_v<T, int64_t>) {
      out_[path] = Type::kInt;
    } else if constexpr (std::is_same_v<T, double>) {
      out_[path] = Type::kDouble;
    } else if constexpr (std::is_same_v<T, std::string>) {
      out_[path] = Type::kString;
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

// ---------------------------------------------------------------------------------------------------------------
// Values as override text.

}  // namespace

std::string yaml_quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\x{:02x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

namespace {

bool plain_safe(const std::string& s) {
  if (s.empty() || s == "-") return false;  // "-" alone would read as a list
  return s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.+-/~") ==
         std::string::npos;
}

// Flow YAML that parses back to `n` with the same scalar texts and quoting.
std::string to_flow(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kNull:
      return "null";
    case Node::Kind::kScalar:
      return n.quoted || !plain_safe(n.scalar) ? yaml_quote(n.scalar) : n.scalar;
    case Node::Kind::kSeq: {
      std::string s = "[";
      for (size_t i = 0; i < n.seq.size(); ++i) s += (i ? ", " : "") + to_flow(n.seq[i]);
      return s + "]";
    }
    case Node::Kind::kMap: {
      std::string s = "{";
      for (size_t i = 0; i < n.map.size(); ++i) {
        s += (i ? ", " : "") + (plain_safe(n.map[i].key) ? n.map[i].key : yaml_quote(n.map[i].key)) + ": " +
             to_flow(n.map[i].value);
      }
      return s + "}";
    }
  }
  return "null";
}

// Relative file paths in the sweep file are relative to the sweep file, as in config files.
void absolutize_paths(const std::string& key, Node& n, const fs::path& base_dir) {
  auto fix = [&](Node& scalar) {
    if (scalar.kind != Node::Kind::kScalar || scalar.scalar.empty()) return;
    const fs::path p(scalar.scalar);
    if (p.is_relative()) scalar.scalar = (base_dir / p).lexically_normal().string();
  };
  if (key == "model.path" || key == "tokenizer.path" || key == "data.cache_dir") fix(n);
  if ((key == "data.train" || key == "data.eval") && n.kind == Node::Kind::kSeq) {
    for (auto& source : n.seq) {
      if (Node* path = source.get("path")) fix(*path);
    }
  }
}

Assignment make_assignment(const std::string& key, const Node& value, const fs::path& base_dir) {
  Node resolved = value;
  absolutize_paths(key, resolved, base_dir);
  Assignment a;
  a.key = key;
  a.yaml = to_flow(resolved);
  a.display = value.kind == Node::Kind::kScalar ? value.scalar : to_flow(value);
  a.where = value.origin.where();
  return a;
}

// "4 significant digits" text of a drawn number, parsing back to the value the trial uses.
std::string round_text(double v) {
  return fmt::format("{:.4g}", v);
}

// ---------------------------------------------------------------------------------------------------------------
// Reading the file.

class Problems {
 public:
  void add(const Origin& origin, const std::string& key, const std::string& message) {
    items_.push_back({origin.line, origin.column, origin.where() + ": " + (key.empty() ? "" : key + ": ") + message});
  }
  void throw_if_any() const {
    if (items_.empty()) return;
    auto sorted = items_;
    std::stable_sort(sorted.begin(), sorted.end(), [](const Item& a, const Item& b) {
      return a.line != b.line ? a.line < b.line : a.column < b.column;
    });
    std::string msg =
        fmt::format("invalid sweep file ({} {}):", sorted.size(), sorted.size() == 1 ? "error" : "errors");
    for (const auto& item : sorted) msg += "\n  " + item.text;
    throw ConfigError(msg, "fix the listed keys; docs/sweeps.md describes the sweep file");
  }

 private:
  struct Item {
    int line = 0, column = 0;
    std::string text;
  };
  std::vector<Item> items_;
};

class Reader {
 public:
  Reader(SweepSpec& spec, Problems& problems, fs::path base_dir)
      : spec_(spec), problems_(problems), base_dir_(std::move(base_dir)) {}

  void read(const Node& root) {
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

 private:
  static std::string join(const std::vector<std::string>& words) {
    std::string s;
    for (size_t i = 0; i < words.size(); ++i) s += (i ? ", " : "") + words[i];
    return s;
  }

  bool string_value(const Node& v, const std::string& key, std::string& out) {
    if (v.kind != Node::Kind::kScalar) {
      problems_.add(v.origin, key, "wrong type (expected a string, got " + v.describe() + ")");
      return false;
    }
    out = v.scalar;
    return true;
  }

  bool int_value(const Node& v, const std::string& key, int64_t min, int64_t& out) {
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

  void read_metric(const Node& v) {
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
  std::optional<Type> config_key(const std::string& key, const Origin& origin, const std::string& section) {
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
    if (key == "run.output_dir" || key == "run.name" || key == "checkpoint.resume") {
      problems_.add(origin, shown,
                    "set by the sweep for every trial (run.name and run.output_dir are the trial's name and "
                    "directory, checkpoint.resume is auto); it cannot be swept");
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

  static std::string first_key_of(const std::string& section) {
    for (const auto& [k, t] : schema()) {
      if (k.rfind(section + ".", 0) == 0 && t != Type::kSection) return k;
    }
    return section + ".KEY";
  }

  bool typed_value(const Node& v, Type t, const std::string& shown) {
    if (fits(v, t)) return true;
    problems_.add(v.origin, shown, std::string("wrong type (expected ") + expected(t) + ", got " + v.describe() + ")");
    return false;
  }

  bool map_section(const Node& v, const std::string& key) {
    if (v.kind == Node::Kind::kMap && !v.map.empty()) return true;
    problems_.add(v.origin, key,
                  v.kind == Node::Kind::kMap || v.kind == Node::Kind::kNull
                      ? "empty (give at least one config key)"
                      : "wrong type (expected a map of config keys, got " + v.describe() + ")");
    return false;
  }

  void read_set(const Node& v) {
    if (!map_section(v, "set")) return;
    for (const auto& e : v.map) {
      const auto type = config_key(e.key, e.key_origin, "set");
      if (type && typed_value(e.value, *type, "set." + e.key)) {
        spec_.set.push_back(make_assignment(e.key, e.value, base_dir_));
      }
    }
  }

  void read_grid(const Node& v) {
    had_trial_section_ = true;
    if (!map_section(v, "grid")) return;
    for (const auto& e : v.map) {
      const std::string shown = "grid." + e.key;
      const auto type = config_key(e.key, e.key_origin, "grid");
      if (!type) continue;
      if (e.value.kind != Node::Kind::kSeq) {
        problems_.add(e.value.origin, shown, "wrong type (expected a list of values, got " + e.value.describe() + ")");
        continue;
      }
      if (e.value.seq.empty()) {
        problems_.add(e.value.origin, shown, "empty list (give at least one value)");
        continue;
      }
      std::vector<Assignment> axis;
      bool ok = true;
      for (size_t i = 0; i < e.value.seq.size(); ++i) {
        const Node& item = e.value.seq[i];
        if (!typed_value(item, *type, shown + "[" + std::to_string(i) + "]")) {
          ok = false;
          continue;
        }
        axis.push_back(make_assignment(e.key, item, base_dir_));
      }
      if (ok) spec_.grid.push_back(std::move(axis));
    }
  }

  void read_list(const Node& v) {
    had_trial_section_ = true;
    if (v.kind != Node::Kind::kSeq || v.seq.empty()) {
      problems_.add(v.origin, "list",
                    v.kind == Node::Kind::kSeq || v.kind == Node::Kind::kNull
                        ? "empty (give at least one map of config keys)"
                        : "wrong type (expected a list of maps of config keys, got " + v.describe() + ")");
      return;
    }
    for (size_t i = 0; i < v.seq.size(); ++i) {
      const Node& entry = v.seq[i];
      const std::string shown = "list[" + std::to_string(i) + "]";
      if (entry.kind == Node::Kind::kNull) {
        spec_.list.emplace_back();  // `- {}` or `-`: a trial of the base config as it is
        continue;
      }
      if (entry.kind != Node::Kind::kMap) {
        problems_.add(entry.origin, shown, "wrong type (expected a map of config keys, got " + entry.describe() + ")");
        continue;
      }
      std::vector<Assignment> set;
      for (const auto& e : entry.map) {
        const auto type = config_key(e.key, e.key_origin, "list");
        if (type && typed_value(e.value, *type, shown + "." + e.key)) {
          set.push_back(make_assignment(e.key, e.value, base_dir_));
        }
      }
      spec_.list.push_back(std::move(set));
    }
  }

  void read_random(const Node& v) {
    had_trial_section_ = true;
    auto& r = spec_.random;
    r.where = v.origin.where();
    if (v.kind != Node::Kind::kMap) {
      problems_.add(v.origin, "random",
                    "wrong type (expected a map with samples, seed and params, got " + v.describe() + ")");
      return;
    }
    int64_t samples = 0;
    const Node* samples_node = v.get("samples");
    if (samples_node == nullptr) {
      problems_.add(v.origin, "random.samples", "missing (how many trials to draw)");
    } else {
      int_value(*samples_node, "random.samples", 1, samples);
    }
    for (const auto& e : v.map) {
      if (e.key == "samples" || e.key == "params") continue;
      if (e.key == "seed") {
        int64_t seed = 0;
        if (int_value(e.value, "random.seed", 0, seed)) r.seed = static_cast<uint64_t>(seed);
        continue;
      }
      const std::string near = config::suggest_key(e.key, {"samples", "seed", "params"});
      problems_.add(e.key_origin, "random." + e.key,
                    "unknown key" + (near.empty() ? std::string("") : "; did you mean " + near + "?") +
                        " (random has samples, seed and params)");
    }
    const Node* params = v.get("params");
    if (params == nullptr) {
      problems_.add(v.origin, "random.params", "missing (a map of config keys to distributions)");
      return;
    }
    if (!map_section(*params, "random.params")) return;
    size_t good = 0;
    for (const auto& e : params->map) {
      const std::string shown = "random.params." + e.key;
      const auto type = config_key(e.key, e.key_origin, "random.params");
      if (!type) continue;
      if (auto p = read_param(e.key, e.value, *type, shown)) {
        r.params.push_back(std::move(*p));
        ++good;
      }
    }
    if (good == params->map.size()) r.samples = samples;
  }

  std::optional<RandomParam> read_param(const std::string& key, const Node& v, Type type, const std::string& shown) {
    static const std::vector<std::string> kKinds = {"uniform", "log_uniform", "choice"};
    if (v.kind != Node::Kind::kMap || v.map.size() != 1) {
      problems_.add(v.origin, shown,
                    "expected one of {uniform: [LOW, HIGH]}, {log_uniform: [LOW, HIGH]} or {choice: [A, B, ...]} "
                    "(got " +
                        v.describe() + ")");
      return std::nullopt;
    }
    const auto& e = v.map.front();
    RandomParam p;
    p.key = key;
    p.where = e.value.origin.where();
    if (e.key == "choice") {
      p.kind = RandomParam::Kind::kChoice;
      if (e.value.kind != Node::Kind::kSeq || e.value.seq.empty()) {
        problems_.add(e.value.origin, shown + ".choice",
                      "expected a non-empty list of values (got " + e.value.describe() + ")");
        return std::nullopt;
      }
      bool ok = true;
      for (size_t i = 0; i < e.value.seq.size(); ++i) {
        if (!typed_value(e.value.seq[i], type, shown + ".choice[" + std::to_string(i) + "]")) {
          ok = false;
        } else {
          p.choices.push_back(make_assignment(key, e.value.seq[i], base_dir_));
        }
      }
      return ok ? std::optional<RandomParam>(std::move(p)) : std::nullopt;
    }
    if (e.key != "uniform" && e.key != "log_uniform") {
      const std::string near = config::suggest_key(e.key, kKinds);
      problems_.add(e.key_origin, shown + "." + e.key,
                    "unknown distribution" + (near.empty() ? std::string("") : "; did you mean " + near + "?") +
                        " (uniform, log_uniform or choice)");
      return std::nullopt;
    }
    p.kind = e.key == "uniform" ? RandomParam::Kind::kUniform : RandomParam::Kind::kLogUniform;
    const std::string at = shown + "." + e.key;
    if (type != Type::kInt && type != Type::kDouble) {
      problems_.add(e.key_origin, at,
                    std::string("a range needs a numeric key; ") + key + " is " + expected(type) + " (use choice)");
      return std::nullopt;
    }
    p.integer = type == Type::kInt;
    double bounds[2] = {0, 0};
    const bool pair = e.value.kind == Node::Kind::kSeq && e.value.seq.size() == 2;
    bool ok = pair;
    for (size_t i = 0; pair && i < 2; ++i) {
      const Node& b = e.value.seq[i];
      int64_t iv = 0;
      if (!plain(b) || !config::parse_double(b.scalar, bounds[i]) || (p.integer && !config::parse_int(b.scalar, iv)))
        ok = false;
    }
    if (!ok) {
      problems_.add(e.value.origin, at,
                    std::string("expected [LOW, HIGH] of ") + (p.integer ? "integers" : "numbers") + " (got " +
                        e.value.describe() + ")");
      return std::nullopt;
    }
    p.low = bounds[0];
    p.high = bounds[1];
    if (!(p.low < p.high)) {
      problems_.add(e.value.origin, at, fmt::format("LOW must be below HIGH (got [{}, {}])", p.low, p.high));
      return std::nullopt;
    }
    if (p.kind == RandomParam::Kind::kLogUniform && p.low <= 0) {
      problems_.add(e.value.origin, at, fmt::format("log_uniform needs LOW > 0 (got {})", p.low));
      return std::nullopt;
    }
    return p;
  }

  void read_median_stop(const Node& v) {
    auto& m = spec_.median_stop;
    if (plain(v) && (v.scalar == "true" || v.scalar == "false")) {
      m.enabled = v.scalar == "true";
      return;
    }
    if (v.kind == Node::Kind::kNull) {
      m.enabled = true;
      return;
    }
    if (v.kind != Node::Kind::kMap) {
      problems_.add(
          v.origin, "median_stop",
          "wrong type (expected true, false or a map with min_trials and warmup_steps, got " + v.describe() + ")");
      return;
    }
    m.enabled = true;
    for (const auto& e : v.map) {
      if (e.key == "enabled") {
        if (plain(e.value) && (e.value.scalar == "true" || e.value.scalar == "false")) {
          m.enabled = e.value.scalar == "true";
        } else {
          problems_.add(e.value.origin, "median_stop.enabled",
                        "wrong type (expected true or false, got " + e.value.describe() + ")");
        }
      } else if (e.key == "min_trials") {
        int_value(e.value, "median_stop.min_trials", 1, m.min_trials);
      } else if (e.key == "warmup_steps") {
        int_value(e.value, "median_stop.warmup_steps", 0, m.warmup_steps);
      } else {
        const std::string near = config::suggest_key(e.key, {"enabled", "min_trials", "warmup_steps"});
        problems_.add(e.key_origin, "median_stop." + e.key,
                      "unknown key" + (near.empty() ? std::string("") : "; did you mean " + near + "?") +
                          " (median_stop has enabled, min_trials and warmup_steps)");
      }
    }
  }

  SweepSpec& spec_;
  Problems& problems_;
  fs::path base_dir_;
  bool had_trial_section_ = false;
  std::map<std::string, std::pair<std::string, std::string>> owners_;  // key -> (section, where)
};

// ---------------------------------------------------------------------------------------------------------------
// Expansion.

std::vector<std::vector<Assignment>> grid_points(const std::vector<std::vector<Assignment>>& axes) {
  std::vector<std::vector<Assignment>> points{{}};
  for (const auto& axis : axes) {
    std::vector<std::vector<Assignment>> next;
    for (const auto& point : points) {
      for (const auto& value : axis) {
        next.push_back(point);
        next.back().push_back(value);
      }
    }
    points = std::move(next);
  }
  return points;
}

// A uniform draw in [0, 1) from 53 random bits (the same on every platform, unlike <random>'s distributions).
double unit(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

std::vector<std::vector<Assignment>> random_samples(const RandomSpec& r) {
  if (r.samples == 0) return {{}};
  std::mt19937_64 rng(r.seed);
  std::vector<std::vector<Assignment>> out;
  for (int64_t s = 0; s < r.samples; ++s) {
    std::vector<Assignment> sample;
    for (const auto& p : r.params) {
      const double u = unit(rng);
      if (p.kind == RandomParam::Kind::kChoice) {
        const size_t i = std::min(p.choices.size() - 1, static_cast<size_t>(u * static_cast<double>(p.choices.size())));
        sample.push_back(p.choices[i]);
        continue;
      }
      std::string text;
      if (p.integer) {
        double v = 0;
        if (p.kind == RandomParam::Kind::kUniform) {
          v = std::floor(p.low + u * (p.high - p.low + 1));
        } else {
          v = std::floor(std::exp(std::log(p.low) + u * (std::log(p.high + 1) - std::log(p.low))));
        }
        text = std::to_string(static_cast<int64_t>(std::clamp(v, p.low, p.high)));
      } else {
        const double v = p.kind == RandomParam::Kind::kUniform
                             ? p.low + u * (p.high - p.low)
                             : std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low)));
        text = round_text(v);
      }
      sample.push_back(Assignment{p.key, text, text, p.where});
    }
    out.push_back(std::move(sample));
  }
  return out;
}

std::string values_text(const std::vector<Assignment>& values) {
  if (values.empty()) return "(the base config)";
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? " " : "") + values[i].key + "=" + values[i].display;
  return s;
}

std::string leaf_of(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// Labels of the swept keys in derived names: the last segment, or the whole key when two share it.
std::map<std::string, std::string> key_labels(const std::vector<std::string>& keys) {
  std::map<std::string, int> leaf_count;
  for (const auto& k : keys) ++leaf_count[leaf_of(k)];
  std::map<std::string, std::string> labels;
  for (const auto& k : keys) labels[k] = leaf_count[leaf_of(k)] > 1 ? k : leaf_of(k);
  return labels;
}

// An Origin back from its "FILE:LINE:COL" text (line 0 when the text has no position).
Origin parse_where(const std::string& where, const fs::path& file) {
  Origin o;
  o.source = file.string();
  const size_t c2 = where.rfind(':');
  const size_t c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : where.rfind(':', c2 - 1);
  if (c1 != std::string::npos) {
    o.line = std::atoi(where.substr(c1 + 1, c2 - c1 - 1).c_str());
    o.column = std::atoi(where.substr(c2 + 1).c_str());
  }
  return o;
}

bool reserved_name(const std::string& name) {
  return name == "sweep.json" || name == "summary.md" || name == "summary.csv" || name == "summary.png";
}

}  // namespace

const std::vector<std::pair<std::string, Mode>>& known_metrics() {
  static const std::vector<std::pair<std::string, Mode>> metrics = {{"eval.loss", Mode::kMin},
                                                                    {"eval.perplexity", Mode::kMin},
                                                                    {"eval.exact_match", Mode::kMax},
                                                                    {"train.loss", Mode::kMin},
                                                                    {"train.tokens_per_s", Mode::kMax},
                                                                    {"train.mfu", Mode::kMax},
                                                                    {"train.peak_memory_gib", Mode::kMin}};
  return metrics;
}

std::string safe_name(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-' || c == '+' || c == '=';
    const char put = ok ? c : '_';
    if (put == '_' && !out.empty() && out.back() == '_') continue;
    out += put;
  }
  while (!out.empty() && (out.front() == '.' || out.front() == '-' || out.front() == '_')) out.erase(0, 1);
  while (!out.empty() && out.back() == '_') out.pop_back();
  if (out.size() > 96) out.resize(96);
  return out.empty() ? "trial" : out;
}

SweepSpec read_sweep_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    throw ConfigError("sweep file '" + file.string() + "' not found",
                      "pass an existing YAML file with --sweep (configs/demo-sweep.yaml is an example)");
  }
  SweepSpec spec;
  spec.file = file;
  Problems problems;
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(file.string());
  } catch (const YAML::ParserException& e) {
    problems.add(Origin{file.string(), e.mark.line + 1, e.mark.column + 1, {}}, "", "YAML syntax error: " + e.msg);
    problems.throw_if_any();
  } catch (const YAML::BadFile&) {
    throw ConfigError("cannot read the sweep file '" + file.string() + "'", "check its permissions");
  }
  const fs::path base_dir = fs::absolute(file).parent_path().lexically_normal();
  const Node root = config::from_yaml(doc, file.string(), base_dir);
  if (root.kind != Node::Kind::kMap) {
    problems.add(root.origin.line > 0 ? root.origin : Origin{file.string(), 0, 0, {}}, "",
                 "the sweep file must be a map with grid:, list: or random: (got " + root.describe() + ")");
    problems.throw_if_any();
  }
  Reader(spec, problems, base_dir).read(root);
  problems.throw_if_any();
  return spec;
}

std::vector<Trial> expand(const SweepSpec& spec) {
  const auto grid = grid_points(spec.grid);
  const std::vector<std::vector<Assignment>> list =
      spec.list.empty() ? std::vector<std::vector<Assignment>>{{}} : spec.list;
  const auto random = random_samples(spec.random);
  std::vector<Trial> trials;
  for (const auto& g : grid) {
    for (const auto& l : list) {
      for (const auto& r : random) {
        Trial t;
        t.index = static_cast<int>(trials.size());
        t.values = g;
        t.values.insert(t.values.end(), l.begin(), l.end());
        t.values.insert(t.values.end(), r.begin(), r.end());
        trials.push_back(std::move(t));
      }
    }
  }

  Problems problems;
  const Origin name_origin = parse_where(spec.name_where, spec.file);

  // The same values twice is the same trial twice.
  std::map<std::string, int> seen_values;
  for (const auto& t : trials) {
    std::vector<std::string> parts;
    for (const auto& a : t.values) parts.push_back(a.key + "=" + a.yaml);
    std::sort(parts.begin(), parts.end());
    std::string signature;
    for (const auto& p : parts) signature += p + "\n";
    const auto [it, inserted] = seen_values.emplace(signature, t.index);
    if (inserted) continue;
    // Point at the value that repeats an earlier one (another place in the file with the same value), else at
    // the last value (random draws come from one place).
    const Trial& earlier = trials[static_cast<size_t>(it->second)];
    Origin o{spec.file.string(), 0, 0, {}};
    std::string key = "trials";
    if (!t.values.empty()) {
      o = parse_where(t.values.back().where, spec.file);
      key = t.values.back().key;
      for (const auto& a : t.values) {
        const bool moved = std::any_of(earlier.values.begin(), earlier.values.end(),
                                       [&](const Assignment& b) { return b.key == a.key && b.where != a.where; });
        if (moved) {
          o = parse_where(a.where, spec.file);
          key = a.key;
          break;
        }
      }
    }
    problems.add(
        o, key,
        fmt::format("trial #{} has the same values as trial #{} ({}); every trial must differ", t.index, it->second,
                    values_text(t.values)) +
            (spec.random.samples > 0 ? " (random draws repeated: draw fewer samples or widen the choices)" : ""));
  }
  problems.throw_if_any();

  if (!spec.name_pattern.empty()) {
    std::map<std::string, int> by_name;
    for (auto& t : trials) {
      std::string name;
      const std::string& p = spec.name_pattern;
      for (size_t i = 0; i < p.size();) {
        if (p.compare(i, 2, "${") != 0) {
          name += p[i++];
          continue;
        }
        const size_t end = p.find('}', i);
        if (end == std::string::npos) {
          problems.add(name_origin, "name", "unterminated '${' in '" + p + "'");
          problems.throw_if_any();
        }
        const std::string ref = p.substr(i + 2, end - i - 2);
        i = end + 1;
        if (ref == "index") {
          name += std::to_string(t.index);
          continue;
        }
        if (std::find(spec.swept_keys.begin(), spec.swept_keys.end(), ref) == spec.swept_keys.end()) {
          std::string keys;
          for (const auto& k : spec.swept_keys) keys += "${" + k + "}, ";
          problems.add(name_origin, "name",
                       "${" + ref + "} is not a swept key (the pattern can use " + keys + "and ${index})");
          problems.throw_if_any();
        }
        std::string value = "default";
        for (const auto& a : t.values) {
          if (a.key == ref) value = a.display;
        }
        name += value;
      }
      t.name = safe_name(name);
      if (reserved_name(t.name)) {
        problems.add(name_origin, "name",
                     "trial #" + std::to_string(t.index) + " gets the name '" + t.name +
                         "', which the sweep directory uses for its own files");
      }
      const auto [it, inserted] = by_name.emplace(t.name, t.index);
      if (!inserted) {
        problems.add(name_origin, "name",
                     fmt::format("trials #{} ({}) and #{} ({}) both get the name '{}'; add the keys that tell them "
                                 "apart to the pattern, or ${{index}}",
                                 it->second, values_text(trials[static_cast<size_t>(it->second)].values), t.index,
                                 values_text(t.values), t.name));
      }
    }
    problems.throw_if_any();
    return trials;
  }

  // Derived names: "<label><value>" joined by '-', e.g. "lr0.001-rank8"; a collision after making the names
  // file-system safe gets the trial's index appended.
  const auto labels = key_labels(spec.swept_keys);
  std::set<std::string> taken;
  for (auto& t : trials) {
    std::string name;
    for (const auto& a : t.values) name += (name.empty() ? "" : "-") + labels.at(a.key) + a.display;
    if (t.values.empty()) name = "base";
    name = safe_name(name);
    if (taken.count(name) != 0 || reserved_name(name))
      name = safe_name(name.substr(0, 88) + "-" + std::to_string(t.index));
    taken.insert(name);
    t.name = name;
  }
  return trials;
}

}  // namespace ft::sweep

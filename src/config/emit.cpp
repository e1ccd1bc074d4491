// Printing a Config as YAML (config show, the run directory's config.yaml) and comparing Configs.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <type_traits>
#include <variant>

#include "config/detail.h"
#include "config/loader.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fs.h"

namespace fs = std::filesystem;

namespace ft::config {

namespace {

// Strings that a YAML reader would take for null, a bool or a number are quoted, as is the empty string.
bool needs_quotes(const std::string& s) {
  static const std::set<std::string> special = {"~",     "null",  "Null", "NULL", "true", "True", "TRUE", "false",
                                                "False", "FALSE", "yes",  "no",   "on",   "off",  "Yes",  "No",
                                                "On",    "Off",   "YES",  "NO",   "ON",   "OFF"};
  if (s.empty() || special.count(s) != 0) return true;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

class Emitter {
 public:
  Emitter(YAML::Emitter& out, bool escape) : out_(out), escape_(escape) {}

  template <class T>
  void operator()(const char* key, T& field, OnResume = OnResume::kMayChange) {
    out_ << YAML::Key << key << YAML::Value;
    if constexpr (is_setting_v<T> || is_open_setting_v<T>) {
      std::string name = setting_text(field);  // as a string: "on" and "off" stay quoted for YAML 1.1 readers
      value(name);
    } else {
      value(field);
    }
  }

 private:
  void value(bool v) { out_ << (v ? "true" : "false"); }
  void value(int64_t v) { out_ << v; }
  void value(double v) { out_ << detail::format_double(v); }
  void value(std::string& raw) {  // non-const: an exact match beats the section template
    std::string s = raw;
    if (escape_) {
      for (size_t i = s.find("${"); i != std::string::npos; i = s.find("${", i + 3)) s.insert(i, "$");
    }
    if (needs_quotes(s)) out_ << YAML::DoubleQuoted;
    out_ << s;
  }
  void value(std::vector<std::string>& v) {
    out_ << YAML::Flow << YAML::BeginSeq;
    for (auto& s : v) value(s);
    out_ << YAML::EndSeq;
  }
  void value(std::vector<double>& v) {
    out_ << YAML::Flow << YAML::BeginSeq;
    for (double d : v) value(d);
    out_ << YAML::EndSeq;
  }
  void value(EvalPrompt& p) {
    if (p.messages.empty()) return value(p.text);
    out_ << YAML::BeginSeq;
    for (auto& turn : p.messages) value(turn);
    out_ << YAML::EndSeq;
  }
  template <class S>
  void value(std::vector<S>& v) {
    if (v.empty()) {
      out_ << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
      return;
    }
    out_ << YAML::BeginSeq;
    for (auto& s : v) value(s);
    out_ << YAML::EndSeq;
  }
  template <class S>
  void value(S& section) {
    out_ << YAML::BeginMap;
    section.visit(*this);
    out_ << YAML::EndMap;
  }

  YAML::Emitter& out_;
  bool escape_;
};

using Leaf = std::variant<bool, int64_t, double, std::string, std::vector<std::string>, std::vector<double>>;

// Flattens a Config to (key path, value) pairs for equal().
class Flattener {
 public:
  Flattener(std::vector<std::pair<std::string, Leaf>>& out, std::string prefix)
      : out_(out), prefix_(std::move(prefix)) {}

  template <class T>
  void operator()(const char* key, T& field, OnResume = OnResume::kMayChange) {
    add(prefix_ + key, field);
  }

 private:
  template <class T>
  void add(const std::string& path, T& field) {
    if constexpr (is_setting_v<T> || is_open_setting_v<T>) {
      out_.emplace_back(path, Leaf(std::in_place_type<std::string>, setting_text(field)));
    } else if constexpr (std::is_constructible_v<Leaf, T> && !std::is_class_v<T>) {
      out_.emplace_back(path, Leaf(std::in_place_type<T>, field));
    } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<std::string>> ||
                         std::is_same_v<T, std::vector<double>>) {
      out_.emplace_back(path, Leaf(std::in_place_type<T>, field));
    } else if constexpr (std::is_same_v<T, std::vector<DataSource>> || std::is_same_v<T, std::vector<PromptTurn>>) {
      out_.emplace_back(path + ".size", Leaf(std::in_place_type<int64_t>, static_cast<int64_t>(field.size())));
      for (size_t i = 0; i < field.size(); ++i) {
        Flattener sub(out_, path + "[" + std::to_string(i) + "].");
        field[i].visit(sub);
      }
    } else if constexpr (std::is_same_v<T, std::vector<EvalPrompt>>) {
      out_.emplace_back(path + ".size", Leaf(std::in_place_type<int64_t>, static_cast<int64_t>(field.size())));
      for (size_t i = 0; i < field.size(); ++i) {
        add(path + "[" + std::to_string(i) + "].text", field[i].text);
        add(path + "[" + std::to_string(i) + "].messages", field[i].messages);
      }
    } else {
      Flattener sub(out_, path + ".");
      field.visit(sub);
    }
  }

  std::vector<std::pair<std::string, Leaf>>& out_;
  std::string prefix_;
};

std::vector<std::pair<std::string, Leaf>> flatten(const Config& config) {
  Config copy = config;
  std::vector<std::pair<std::string, Leaf>> out;
  Flattener f(out, "");
  copy.visit(f);
  return out;
}

}  // namespace

namespace detail {

std::string format_double(double v) {
  char buf[40];
  if (std::fabs(v) < 1e15 && std::floor(v) == v) {
    std::snprintf(buf, sizeof buf, "%.0f", v);  // whole numbers read best without an exponent: 10000, not 1e4
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  // "1e-05" -> "1e-5": C's exponent padding is noise in a config file.
  const size_t e = s.find('e');
  if (e != std::string::npos) {
    size_t digits = e + 2;
    while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
    if (s[e + 1] == '+') s.erase(e + 1, 1);
  }
  return s;
}

std::string emit_yaml(const Config& config, bool escape_interpolation) {
  Config copy = config;
  YAML::Emitter out;
  out << YAML::BeginMap;
  Emitter emitter(out, escape_interpolation);
  copy.visit(emitter);
  out << YAML::EndMap;
  FT_CHECK(out.good(), "YAML emitter failed: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace detail

std::string to_yaml(const Config& config) {
  return detail::emit_yaml(config, true);
}

bool equal(const Config& a, const Config& b) {
  return flatten(a) == flatten(b);
}

namespace {

void count_nodes(const YAML::Node& n, size_t& budget) {
  for (const auto& item : n) {
    if (budget == 0) throw ConfigError("too many values (aliases that repeat each other?)");
    --budget;
    if (n.IsMap()) {
      count_nodes(item.second, budget);
    } else {
      count_nodes(item, budget);
    }
  }
}

// Leaf values of a printed config by dotted key; a list is one value, printed in flow style. `budget` counts the
// nodes visited, so a file of aliases that repeat each other (an anchor bomb) is refused instead of expanded.
void flatten_yaml(const YAML::Node& n, const std::string& path, std::map<std::string, std::string>& out,
                  size_t& budget) {
  if (budget == 0) throw ConfigError("too many values (aliases that repeat each other?)");
  --budget;
  if (n.IsMap()) {
    for (const auto& kv : n)
      flatten_yaml(kv.second, path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar(), out, budget);
    return;
  }
  if (n.IsScalar()) {
    out[path] = n.Scalar();
    return;
  }
  count_nodes(n, budget);
  YAML::Emitter e;
  e << YAML::Flow << n;
  out[path] = e.c_str();
}

std::map<std::string, std::string> yaml_leaves(const std::string& text, const char* which) {
  std::map<std::string, std::string> out;
  size_t budget = 100'000;
  try {
    flatten_yaml(YAML::Load(text), "", out, budget);
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string(which) + " is not valid YAML: " + e.what());
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(which) + ": " + e.what());
  }
  return out;
}

}  // namespace

std::vector<std::string> yaml_differences(const std::string& old_yaml, const std::string& new_yaml) {
  const auto before = yaml_leaves(old_yaml, "the earlier config");
  const auto after = yaml_leaves(new_yaml, "the new config");
  std::set<std::string> keys;
  for (const auto& [k, v] : before) keys.insert(k);
  for (const auto& [k, v] : after) keys.insert(k);
  std::vector<std::string> out;
  for (const auto& k : keys) {
    const auto b = before.find(k);
    const auto a = after.find(k);
    const std::string old_value = b == before.end() ? "(absent)" : b->second;
    const std::string new_value = a == after.end() ? "(absent)" : a->second;
    if (old_value != new_value) out.push_back(k + ": " + old_value + " -> " + new_value);
  }
  return out;
}

void write_resolved_config(const LoadedConfig& loaded, const fs::path& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw Error("cannot create run directory '" + run_dir.string() + "': " + ec.message());
  const fs::path final_path = run_dir / "config.yaml";
  const std::string yaml = to_yaml(loaded.config);
  if (fs::exists(final_path) && !yaml_differences(read_text_file(final_path), yaml).empty()) {
    const fs::path history = run_dir / "config_history";
    fs::create_directories(history);
    int n = 1;
    while (fs::exists(history / (std::to_string(n) + ".yaml"))) ++n;
    fs::copy_file(final_path, history / (std::to_string(n) + ".yaml"));
  }
  std::string text = "# Resolved configuration of this run (from " + loaded.file.string();
  for (const auto& o : loaded.overrides) text += " " + o;
  text += ").\n# Reproduce with: finetune train --config " + final_path.string() + "\n";
  text += yaml;
  write_file_atomic(final_path, text);
}

}  // namespace ft::config

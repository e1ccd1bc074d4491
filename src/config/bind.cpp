// Binding the merged tree into ft::Config through the structs' visit(): type checks, unknown keys with the
// nearest known key, relative file paths made absolute against the file that set them.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <type_traits>

#include "config/detail.h"
#include "config/loader.h"

namespace fs = std::filesystem;

namespace ft::config {

namespace {

// Lists every key path of the schema (see known_keys()).
class KeyCollector {
 public:
  KeyCollector(std::vector<std::string>& out, std::string prefix) : out_(out), prefix_(std::move(prefix)) {}

  template <class T>
  void operator()(const char* key, T& field, OnResume = OnResume::kMayChange) {
    const std::string path = prefix_ + key;
    out_.push_back(path);
    if constexpr (std::is_same_v<T, std::vector<DataSource>>) {
      DataSource element;
      KeyCollector sub(out_, path + "[].");
      element.visit(sub);
    } else if constexpr (detail::is_section_v<T>) {
      KeyCollector sub(out_, path + ".");
      field.visit(sub);
    }
  }

 private:
  std::vector<std::string>& out_;
  std::string prefix_;
};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::pair<std::string, std::string> parent_leaf(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos) return {"", path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

using detail::Errors;

// Where relative paths are resolved against the directory of the YAML file that set them.
const std::set<std::string>& file_keys() {
  static const std::set<std::string> keys = {"model.path", "tokenizer.path", "data.cache_dir", "data.train[].path",
                                             "data.eval[].path"};
  return keys;
}

class Binder {
 public:
  Binder(const Node& map, std::string shown, std::string normal, std::map<std::string, Origin>& locations,
         Errors& errors)
      : map_(map), shown_(std::move(shown)), normal_(std::move(normal)), locations_(locations), errors_(errors) {}

  template <class T>
  void operator()(const char* key, T& field, OnResume = OnResume::kMayChange) {
    for (const auto& e : map_.map) {
      if (e.key != key) continue;
      used_.insert(e.key);
      const std::string shown = shown_ + key;
      if (!e.value.origin.is_default()) locations_[shown] = e.value.origin;
      bind(e.value, shown, normal_ + key, field);
    }
  }

  // Reports the keys of the map that no field claimed.
  void finish() {
    for (const auto& e : map_.map) {
      if (used_.count(e.key) != 0) continue;
      const std::string normal = normal_ + e.key;
      std::string near = suggest_key(normal, known_keys());
      // Show the suggestion with the user's list index when it is a sibling.
      if (!near.empty() && parent_leaf(near).first == parent_leaf(normal).first && !shown_.empty()) {
        near = shown_ + parent_leaf(near).second;
      }
      if (e.key == "<<") {  // YAML 1.1's merge key, which yaml-cpp reads as a plain key
        errors_.add(e.key_origin, shown_ + e.key,
                    "YAML merge keys (<<: *anchor) are not supported; write the keys out");
        continue;
      }
      errors_.add(e.key_origin, shown_ + e.key,
                  "unknown key" + (near.empty() ? std::string() : "; did you mean " + near + "?"));
    }
  }

 private:
  void type_error(const Node& n, const std::string& key, const std::string& expected) {
    errors_.add(n.origin, key, "wrong type (expected " + expected + ", got " + n.describe() + ")");
  }

  bool plain_scalar(const Node& n) const { return n.kind == Node::Kind::kScalar && !n.quoted; }

  void bind(const Node& n, const std::string& key, const std::string& /*normal*/, bool& out) {
    static const std::set<std::string> yes = {"true", "True", "TRUE"};
    static const std::set<std::string> no = {"false", "False", "FALSE"};
    if (plain_scalar(n) && yes.count(n.scalar) != 0) {
      out = true;
    } else if (plain_scalar(n) && no.count(n.scalar) != 0) {
      out = false;
    } else {
      type_error(n, key, "true or false");
    }
  }

  void bind(const Node& n, const std::string& key, const std::string& /*normal*/, int64_t& out) {
    if (!plain_scalar(n) || !parse_int(n.scalar, out)) type_error(n, key, "an integer");
  }

  void bind(const Node& n, const std::string& key, const std::string& /*normal*/, double& out) {
    if (!plain_scalar(n) || !parse_double(n.scalar, out)) type_error(n, key, "a number");
  }

  void bind(const Node& n, const std::string& key, const std::string& normal, std::string& out) {
    if (n.kind == Node::Kind::kNull) {
      out.clear();
    } else if (n.kind == Node::Kind::kScalar) {
      out = n.scalar;
    } else {
      type_error(n, key, "a string");
      return;
    }
    if (!out.empty() && file_keys().count(normal) != 0 && !n.origin.base_dir.empty()) {
      const fs::path p(out);
      if (p.is_relative()) out = (n.origin.base_dir / p).lexically_normal().string();
    }
  }

  void bind(const Node& n, const std::string& key, const std::string& /*normal*/, std::vector<std::string>& out) {
    if (n.kind == Node::Kind::kNull) {
      out.clear();
      return;
    }
    if (n.kind != Node::Kind::kSeq) return type_error(n, key, "a list of strings");
    std::vector<std::string> v;
    for (size_t i = 0; i < n.seq.size(); ++i) {
      const Node& item = n.seq[i];
      if (item.kind != Node::Kind::kScalar) return type_error(item, key + "[" + std::to_string(i) + "]", "a string");
      v.push_back(item.scalar);
    }
    out = std::move(v);
  }

  void bind(const Node& n, const std::string& key, const std::string& /*normal*/, std::vector<double>& out) {
    if (n.kind == Node::Kind::kNull) {
      out.clear();
      return;
    }
    if (n.kind != Node::Kind::kSeq) return type_error(n, key, "a list of numbers");
    std::vector<double> v(n.seq.size());
    bool ok = true;
    for (size_t i = 0; i < n.seq.size(); ++i) {
      const Node& item = n.seq[i];
      if (!plain_scalar(item) || !parse_double(item.scalar, v[i])) {
        type_error(item, key + "[" + std::to_string(i) + "]", "a number");
        ok = false;
      }
    }
    if (ok) out = std::move(v);
  }

  // A closed-set setting: one of its table's names (config/settings.h).
  template <class E, std::enable_if_t<is_setting_v<E>, int> = 0>
  void bind(const Node& n, const std::string& key, const std::string& /*normal*/, E& out) {
    if (n.kind != Node::Kind::kScalar) return type_error(n, key, "one of " + setting_names<E>());
    if (const auto v = parse_setting<E>(n.scalar)) {
      out = *v;
      return;
    }
    std::vector<std::string> choices;
    for (const auto& e : EnumTable<E>::entries) choices.emplace_back(e.name);
    errors_.add(n.origin, key, detail::invalid_choice(n.scalar, choices));
  }

  // A keyword-or-value setting (config/open_settings.h).
  template <class T, std::enable_if_t<is_open_setting_v<T>, int> = 0>
  void bind(const Node& n, const std::string& key, const std::string& /*normal*/, T& out) {
    if (n.kind != Node::Kind::kScalar) return type_error(n, key, T::kExpected);
    if (const auto v = T::parse(n.scalar)) {
      out = *v;
      return;
    }
    errors_.add(n.origin, key, "invalid value '" + n.scalar + "' (expected " + T::kExpected + ")");
  }

  // eval.prompts[i]: a string, or a list of {role, content} turns.
  void bind(const Node& n, const std::string& key, const std::string& normal, EvalPrompt& out) {
    if (n.kind == Node::Kind::kScalar) {
      out.text = n.scalar;
    } else if (n.kind == Node::Kind::kSeq) {
      bind(n, key, normal, out.messages);
    } else {
      type_error(n, key, "a string or a list of {role, content} turns");
    }
  }

  template <class S>
  void bind(const Node& n, const std::string& key, const std::string& normal, std::vector<S>& out) {
    if (n.kind == Node::Kind::kNull) {
      out.clear();
      return;
    }
    if (n.kind != Node::Kind::kSeq) return type_error(n, key, "a list of maps");
    std::vector<S> v(n.seq.size());
    for (size_t i = 0; i < n.seq.size(); ++i) {
      bind(n.seq[i], key + "[" + std::to_string(i) + "]", normal + "[]", v[i]);
    }
    out = std::move(v);
  }

  template <class S, std::enable_if_t<!is_setting_v<S> && !is_open_setting_v<S>, int> = 0>
  void bind(const Node& n, const std::string& key, const std::string& normal, S& section) {
    if (n.kind == Node::Kind::kNull) return;  // `section:` with nothing under it keeps the defaults
    if (n.kind != Node::Kind::kMap) return type_error(n, key, "a map of keys");
    Binder sub(n, key + ".", normal + ".", locations_, errors_);
    section.visit(sub);
    sub.finish();
  }

  const Node& map_;
  std::string shown_;   // key prefix as shown to the user, with list indices: "data.train[0]."
  std::string normal_;  // the same with indices dropped, as known_keys() spells it: "data.train[]."
  std::map<std::string, Origin>& locations_;
  Errors& errors_;
  std::set<std::string> used_;
};

}  // namespace

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty() || s.find_first_not_of("+-0123456789") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  out = v;
  return true;
}

bool parse_double(const std::string& s, double& out) {
  if (s.empty() || s.find_first_not_of("+-0123456789.eE") != std::string::npos) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  out = v;
  return true;
}

std::string suggest_key(const std::string& key_as_written, const std::vector<std::string>& candidates) {
  std::string key;  // list indices dropped, as candidates spell them: "data.train[0].x" -> "data.train[].x"
  for (size_t i = 0; i < key_as_written.size(); ++i) {
    key += key_as_written[i];
    if (key_as_written[i] == '[') {
      while (i + 1 < key_as_written.size() && key_as_written[i + 1] != ']') ++i;
    }
  }
  const auto [parent, leaf] = parent_leaf(key);
  std::string best;
  size_t best_score = std::string::npos;
  for (const auto& c : candidates) {
    const auto [c_parent, c_leaf] = parent_leaf(c);
    // Either the whole path is close, or the leaf is close (one extra point when it sits in another section).
    const size_t whole = edit_distance(key, c);
    const size_t by_leaf = edit_distance(leaf, c_leaf) + (c_parent == parent ? 0 : 1);
    const size_t score = std::min(whole, by_leaf);
    if (score < best_score) {
      best_score = score;
      best = c;
    }
  }
  const size_t limit = std::max<size_t>(2, leaf.size() / 3);
  return best_score <= limit ? best : std::string();
}

const std::vector<std::string>& known_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    Config c;
    KeyCollector collector(out, "");
    c.visit(collector);
    return out;
  }();
  return keys;
}

namespace detail {

void bind(const Node& root, Config& config, std::map<std::string, Origin>& locations, Errors& errors) {
  Binder binder(root, "", "", locations, errors);
  config.visit(binder);
  binder.finish();
}

}  // namespace detail

}  // namespace ft::config

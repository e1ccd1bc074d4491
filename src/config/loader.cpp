// load_config(): composition, overrides and interpolation on the origin-tracking tree, then bind and validate.
#include "config/loader.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <vector>

#include "config/detail.h"
#include "util/error.h"
#include "util/fmt.h"

namespace fs = std::filesystem;

namespace ft::config {

namespace detail {

void Errors::add(const Origin& origin, const std::string& key, const std::string& message) {
  if (origin.is_default() && !fallback_.is_default()) return add(fallback_, key, message);
  for (const auto& s : silenced_) {
    if (s == key) return;
  }
  items_.push_back({origin.source, origin.line, origin.column, {key, origin.where(), message}});
}

std::vector<Errors::Item> Errors::sorted() const {
  std::vector<Item> sorted = items_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Item& a, const Item& b) {
    const bool a_over = a.source.rfind("<override", 0) == 0, b_over = b.source.rfind("<override", 0) == 0;
    if (a_over != b_over) return b_over;  // file errors first, then overrides in the order given
    if (a_over) return false;
    if (a.source != b.source) return a.source < b.source;
    if ((a.line == 0) != (b.line == 0)) return b.line == 0;  // whole-file errors after positioned ones
    if (a.line != b.line) return a.line < b.line;
    return a.column < b.column;
  });
  return sorted;
}

std::vector<Problem> Errors::problems() const {
  std::vector<Problem> out;
  for (const auto& item : sorted()) out.push_back(item.problem);
  return out;
}

void Errors::throw_if_any() const {
  if (items_.empty()) return;
  std::string msg =
      "invalid configuration (" + std::to_string(items_.size()) + (items_.size() == 1 ? " error):" : " errors):");
  for (const auto& p : problems()) msg += "\n  " + p.where + ": " + (p.key.empty() ? "" : p.key + ": ") + p.message;
  throw ConfigError(msg, "fix the listed keys; `finetune config validate --config FILE` rechecks without running");
}

}  // namespace detail

namespace {

using detail::Errors;

constexpr size_t kMaxCompositionDepth = 32;                // bases of bases of ...
constexpr size_t kMaxComposedFiles = 256;                  // files read for one config, repeats counted
constexpr size_t kMaxInterpolatedBytes = size_t{1} << 20;  // one value after ${...} interpolation

// A file being composed: its canonical path (to detect cycles) and its path as written (to show them).
struct Link {
  fs::path canonical;
  fs::path shown;
};

std::string chain_text(const std::vector<Link>& chain, const fs::path& again) {
  std::string s;
  for (const auto& l : chain) s += l.shown.string() + " -> ";
  return s + again.string();
}

// Reads `file` with its `defaults:` bases (applied in order, then the file itself on top).
Node compose(const fs::path& file, std::vector<Link>& chain, std::vector<fs::path>& sources, Errors& errors) {
  Node result;
  result.kind = Node::Kind::kMap;
  const fs::path base_dir = fs::absolute(file).parent_path().lexically_normal();
  Node tree;
  try {
    tree = load_yaml_file(file, base_dir);
  } catch (const YAML::ParserException& e) {
    Origin o{file.string(), e.mark.line + 1, e.mark.column + 1, {}};
    errors.add(o, "", yaml_syntax_error(e, file));
    return result;
  } catch (const YAML::BadFile&) {
    errors.add(Origin{file.string(), 0, 0, {}}, "", "cannot read the file");
    return result;
  }
  if (tree.kind == Node::Kind::kNull) return result;  // an empty file
  if (tree.kind != Node::Kind::kMap) {
    errors.add(tree.origin, "", "the top level must be a map of sections (got " + tree.describe() + ")");
    return result;
  }
  for (auto it = tree.map.begin(); it != tree.map.end(); ++it) {
    if (it->key != "defaults") continue;
    std::vector<const Node*> bases;
    if (it->value.kind == Node::Kind::kSeq) {
      for (const auto& b : it->value.seq) bases.push_back(&b);
    } else if (it->value.kind == Node::Kind::kScalar) {
      bases.push_back(&it->value);
    } else if (it->value.kind != Node::Kind::kNull) {
      errors.add(it->value.origin, "defaults",
                 "wrong type (expected a list of YAML files, got " + it->value.describe() + ")");
    }
    chain.push_back({fs::weakly_canonical(fs::absolute(file)), file});
    for (const Node* b : bases) {
      if (b->kind != Node::Kind::kScalar || b->scalar.empty()) {
        errors.add(b->origin, "defaults", "wrong type (expected a file name, got " + b->describe() + ")");
        continue;
      }
      const fs::path base = (file.parent_path() / b->scalar).lexically_normal();
      std::error_code ec;
      if (!fs::is_regular_file(base, ec)) {
        errors.add(b->origin, "defaults",
                   "base file '" + base.string() + "' not found (paths are relative to " +
                       (file.parent_path().empty() ? "." : file.parent_path().string()) + ")");
        continue;
      }
      // Bounded work whatever the files say: a chain of bases, each listing the next twice, doubles per level.
      if (chain.size() >= kMaxCompositionDepth || sources.size() >= kMaxComposedFiles) {
        const bool deep = chain.size() >= kMaxCompositionDepth;
        throw ConfigError(b->origin.where() + ": defaults: more than " +
                              std::to_string(deep ? kMaxCompositionDepth : kMaxComposedFiles) +
                              (deep ? " levels of bases" : " base files read for one config"),
                          "list each base once; a base listed several times at every level doubles the work");
      }
      const fs::path canon = fs::weakly_canonical(fs::absolute(base));
      bool cycle = false;
      for (const auto& c : chain) cycle = cycle || c.canonical == canon;
      if (cycle) {
        errors.add(b->origin, "defaults", "composition cycle: " + chain_text(chain, base));
        continue;
      }
      merge(result, compose(base, chain, sources, errors));
    }
    chain.pop_back();
    tree.map.erase(it);
    break;
  }
  sources.push_back(file);  // after its bases: the order they apply in
  merge(result, tree);
  return result;
}

void clear_positions(Node& n) {
  n.origin.line = n.origin.column = 0;
  for (auto& e : n.map) {
    e.key_origin.line = e.key_origin.column = 0;
    clear_positions(e.value);
  }
  for (auto& s : n.seq) clear_positions(s);
}

bool valid_key_part(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

void apply_override(Node& root, const std::string& text, Errors& errors) {
  const Origin source{"<override '" + text + "'>", 0, 0, {}};
  const size_t eq = text.find('=');
  if (eq == std::string::npos) {
    errors.add(source, text, "not of the form key=value (e.g. optimizer.lr=1e-4)");
    return;
  }
  const std::string key = text.substr(0, eq);
  const auto parts = split_path(key);
  for (const auto& p : parts) {
    if (!valid_key_part(p)) {
      errors.add(source, key, "not a valid key path (expected dotted names like train.max_steps)");
      return;
    }
  }
  if (parts.front() == "defaults") {
    errors.add(source, key, "bases are chosen in the config file; `defaults` cannot be overridden");
    return;
  }
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::ParserException& e) {
    errors.add(source, key, "cannot parse the value as YAML (" + e.msg + "); quote strings with special characters");
    return;
  }
  Node node = from_yaml(value, source.source, fs::current_path());
  clear_positions(node);
  set_path(root, parts, std::move(node));
}

// Resolves ${section.key} and ${env:VAR} in every string of the tree, in place.
class Interpolator {
 public:
  Interpolator(Node& root, Errors& errors) : root_(root), errors_(errors) {}

  void run() { walk(root_, ""); }

 private:
  void walk(Node& n, const std::string& path) {
    switch (n.kind) {
      case Node::Kind::kScalar:
        resolve(n, path);
        break;
      case Node::Kind::kMap:
        for (auto& e : n.map) walk(e.value, path.empty() ? e.key : path + "." + e.key);
        break;
      case Node::Kind::kSeq:
        for (size_t i = 0; i < n.seq.size(); ++i) walk(n.seq[i], path + "[" + std::to_string(i) + "]");
        break;
      case Node::Kind::kNull:
        break;
    }
  }

  // Makes n.scalar final; false when it could not be (the error is already reported).
  bool resolve(Node& n, const std::string& path) {
    if (done_.count(&n) != 0) return failed_.count(&n) == 0;
    stack_.push_back(path);
    auto text = expand(n.scalar, n.origin, path);
    stack_.pop_back();
    done_.insert(&n);
    if (!text) {
      failed_.insert(&n);
      errors_.silence(path);
      return false;
    }
    n.scalar = *text;
    return true;
  }

  std::optional<std::string> expand(const std::string& s, const Origin& origin, const std::string& path) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      if (s.compare(i, 3, "$${") == 0) {  // escaped: a literal "${"
        out += "${";
        i += 3;
        continue;
      }
      if (s.compare(i, 2, "${") != 0) {
        out += s[i++];
        continue;
      }
      size_t depth = 0;
      size_t end = i;
      for (; end < s.size(); ++end) {
        if (s.compare(end, 2, "${") == 0) ++depth;
        if (s[end] == '}' && --depth == 0) break;
      }
      if (end >= s.size()) {
        errors_.add(origin, path, "unterminated '${' in '" + s + "' (write $${ for a literal ${)");
        return std::nullopt;
      }
      auto ref = expand(s.substr(i + 2, end - i - 2), origin, path);  // nested references first
      if (!ref) return std::nullopt;
      auto value = lookup(*ref, origin, path);
      if (!value) return std::nullopt;
      out += *value;
      if (out.size() > kMaxInterpolatedBytes) {
        errors_.add(origin, path,
                    "interpolation makes a value longer than " + std::to_string(kMaxInterpolatedBytes) +
                        " bytes (references that repeat each other grow exponentially)");
        return std::nullopt;
      }
      i = end + 1;
    }
    return out;
  }

  std::optional<std::string> lookup(const std::string& ref, const Origin& origin, const std::string& path) {
    if (ref.rfind("env:", 0) == 0) {
      const char* v = std::getenv(ref.c_str() + 4);
      if (v == nullptr) {
        errors_.add(origin, path,
                    "environment variable " + ref.substr(4) + " is not set (referenced as ${" + ref + "})");
        return std::nullopt;
      }
      return std::string(v);
    }
    std::string dotted;  // "data.train[0].path" -> "data.train.0.path"
    for (char ch : ref) {
      if (ch == '[')
        dotted += '.';
      else if (ch != ']')
        dotted += ch;
    }
    Node* n = &root_;
    for (const auto& part : split_path(dotted)) {
      Node* next = nullptr;
      if (n->kind == Node::Kind::kMap) {
        next = n->get(part);
      } else if (n->kind == Node::Kind::kSeq && !part.empty() && part.size() <= 9 &&
                 part.find_first_not_of("0123456789") == std::string::npos) {
        const size_t idx = std::stoul(part);
        if (idx < n->seq.size()) next = &n->seq[idx];
      }
      if (next == nullptr) {
        std::string near = suggest_key(ref, known_keys());
        const size_t slot = near.find("[]");
        const size_t open = ref.find('['), close = ref.find(']');
        if (slot != std::string::npos && open != std::string::npos && close > open) {
          near.replace(slot, 2, ref.substr(open, close - open + 1));  // keep the user's list index
        }
        // The key exists, but not at that list index: say how long the list is instead of suggesting the same text.
        const std::string why =
            near == ref && n->kind == Node::Kind::kSeq
                ? fmt::format(" (the list has {} entr{})", n->seq.size(), n->seq.size() == 1 ? "y" : "ies")
                : (near.empty() || near == ref ? "" : " (did you mean ${" + near + "}?)");
        errors_.add(origin, path, "unknown reference ${" + ref + "}" + why);
        return std::nullopt;
      }
      n = next;
    }
    if (n->kind == Node::Kind::kNull) return std::string();
    if (n->kind != Node::Kind::kScalar) {
      errors_.add(origin, path, "${" + ref + "} is " + n->describe() + "; only single values can be interpolated");
      return std::nullopt;
    }
    for (size_t i = 0; i < stack_.size(); ++i) {
      if (stack_[i] != ref) continue;
      std::string chain;
      for (size_t j = i; j < stack_.size(); ++j) chain += stack_[j] + " -> ";
      errors_.add(origin, path, "reference cycle: " + chain + ref);
      return std::nullopt;
    }
    if (!resolve(*n, ref)) return std::nullopt;
    return n->scalar;
  }

  Node& root_;
  Errors& errors_;
  std::vector<std::string> stack_;  // key paths being resolved, outermost first
  std::set<const Node*> done_;
  std::set<const Node*> failed_;
};

}  // namespace

std::string LoadedConfig::where(const std::string& key) const {
  const auto it = locations.find(key);
  return it != locations.end() ? it->second.where() : file.string();
}

namespace {

// load_config() up to binding: what comes before the validation throws, binding's own errors go to `errors`.
LoadedConfig load_bound(const fs::path& file, const std::vector<std::string>& overrides, Errors& errors) {
  LoadedConfig loaded;
  loaded.file = file;
  loaded.overrides = overrides;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    throw ConfigError("config file '" + file.string() + "' not found",
                      "pass an existing YAML file with --config (see configs/ for examples)");
  }

  // Built-in defaults first, so ${run.name} in a default (run.output_dir) resolves like any other value.
  Node root = from_yaml(YAML::Load(detail::emit_yaml(Config{}, false)), "", {});
  std::vector<Link> chain;
  merge(root, compose(file, chain, loaded.sources, errors));
  for (const auto& o : overrides) apply_override(root, o, errors);
  // Syntax, composition and override errors first: later checks would mostly repeat them.
  errors.throw_if_any();

  Interpolator(root, errors).run();
  detail::bind(root, loaded.config, loaded.locations, errors);
  return loaded;
}

Origin file_origin(const fs::path& file) {
  return {file.string(), 0, 0, {}};
}

}  // namespace

LoadedConfig load_config(const fs::path& file, const std::vector<std::string>& overrides) {
  Errors errors(file_origin(file));
  LoadedConfig loaded = load_bound(file, overrides, errors);
  detail::validate(loaded.config, loaded.locations, file_origin(file), errors);
  errors.throw_if_any();
  return loaded;
}

LoadedConfig load_config_unvalidated(const fs::path& file, const std::vector<std::string>& overrides,
                                     std::vector<Problem>& problems) {
  Errors errors(file_origin(file));
  LoadedConfig loaded = load_bound(file, overrides, errors);
  errors.throw_if_any();  // unknown keys and wrong types: there is no value to show
  detail::validate(loaded.config, loaded.locations, file_origin(file), errors);
  problems = errors.problems();
  return loaded;
}

}  // namespace ft::config

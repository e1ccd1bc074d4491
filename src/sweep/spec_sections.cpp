// The sections of the sweep file (set:, grid:, list:, random: and median_stop:) and their values as override text.
#include "config/loader.h"
#include "sweep/spec_internal.h"
#include "util/fmt.h"

namespace fs = std::filesystem;

namespace ft::sweep {

// ---------------------------------------------------------------------------------------------------------------
// Values as override text.

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

using config::Node;

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

}  // namespace

namespace detail {

// ---------------------------------------------------------------------------------------------------------------
// The sections.

void Reader::read_set(const Node& v) {
  if (!map_section(v, "set")) return;
  for (const auto& e : v.map) {
    const auto type = config_key(e.key, e.key_origin, "set");
    if (type && typed_value(e.value, *type, "set." + e.key)) {
      spec_.set.push_back(make_assignment(e.key, e.value, base_dir_));
    }
  }
}

void Reader::read_grid(const Node& v) {
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

void Reader::read_list(const Node& v) {
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

void Reader::read_random(const Node& v) {
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

std::optional<RandomParam> Reader::read_param(const std::string& key, const Node& v, Type type,
                                              const std::string& shown) {
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

void Reader::read_median_stop(const Node& v) {
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

}  // namespace detail
}  // namespace ft::sweep

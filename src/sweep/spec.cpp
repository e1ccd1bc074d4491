#include "sweep/spec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>

#include "metrics/record.h"
#include "sweep/spec_internal.h"
#include "util/fmt.h"

namespace fs = std::filesystem;

namespace ft::sweep {
namespace {

using config::Origin;
using detail::Problems;

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

// "4 significant digits" text of a drawn number, parsing back to the value the trial uses.
std::string round_text(double v) {
  return fmt::format("{:.4g}", v);
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
  using metrics::kEvalEvent, metrics::kTrainEvent, metrics::metric_name;  // metrics.jsonl's names (metrics/record.h)
  static const std::vector<std::pair<std::string, Mode>> known = {
      {metric_name(kEvalEvent, metrics::kLoss), Mode::kMin},
      {metric_name(kEvalEvent, metrics::kPerplexity), Mode::kMin},
      {metric_name(kEvalEvent, metrics::kExactMatch), Mode::kMax},
      {metric_name(kTrainEvent, metrics::kLoss), Mode::kMin},
      {metric_name(kTrainEvent, metrics::kTokensPerS), Mode::kMax},
      {metric_name(kTrainEvent, metrics::kMfu), Mode::kMax},
      {metric_name(kTrainEvent, metrics::kPeakMemoryGib), Mode::kMin}};
  return known;
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

namespace {

// Every combination, in the order spec.h promises: the grid's points (the first key varies slowest) times the list's
// entries times the random samples, a missing section counting as one empty set.
std::vector<Trial> combine(const SweepSpec& spec) {
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
  return trials;
}

// The trial's values as one text, whatever their order (two list entries may give the same keys in another order).
std::string value_signature(const Trial& t) {
  std::vector<std::string> parts;
  for (const auto& a : t.values) parts.push_back(a.key + "=" + a.yaml);
  std::sort(parts.begin(), parts.end());
  std::string signature;
  for (const auto& p : parts) signature += p + "\n";
  return signature;
}

// Where to report trial `t` repeating `earlier`: at the value that repeats an earlier one (another place in the file
// with the same value), else at the last value (random draws come from one place).
std::pair<Origin, std::string> repeat_origin(const Trial& t, const Trial& earlier, const fs::path& file) {
  Origin o{file.string(), 0, 0, {}};
  std::string key = "trials";
  if (!t.values.empty()) {
    o = parse_where(t.values.back().where, file);
    key = t.values.back().key;
    for (const auto& a : t.values) {
      const bool moved = std::any_of(earlier.values.begin(), earlier.values.end(),
                                     [&](const Assignment& b) { return b.key == a.key && b.where != a.where; });
      if (moved) {
        o = parse_where(a.where, file);
        key = a.key;
        break;
      }
    }
  }
  return {o, key};
}

// The same values twice is the same trial twice.
void check_distinct_values(const std::vector<Trial>& trials, const SweepSpec& spec, Problems& problems) {
  std::map<std::string, int> seen_values;
  for (const auto& t : trials) {
    const auto [it, inserted] = seen_values.emplace(value_signature(t), t.index);
    if (inserted) continue;
    const auto [o, key] = repeat_origin(t, trials[static_cast<size_t>(it->second)], spec.file);
    problems.add(
        o, key,
        fmt::format("trial #{} has the same values as trial #{} ({}); every trial must differ", t.index, it->second,
                    values_text(t.values)) +
            (spec.random.samples > 0 ? " (random draws repeated: draw fewer samples or widen the choices)" : ""));
  }
}

// What ${ref} of the name pattern stands for in trial `t`: its index, or its value of a swept key ("default" when
// the trial leaves the key alone).
std::string pattern_value(const std::string& ref, const Trial& t, const SweepSpec& spec, const Origin& name_origin,
                          Problems& problems) {
  if (ref == "index") return std::to_string(t.index);
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
  return value;
}

// The name pattern filled in for trial `t`, before it is made file-system safe.
std::string pattern_name(const Trial& t, const SweepSpec& spec, const Origin& name_origin, Problems& problems) {
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
    name += pattern_value(ref, t, spec, name_origin, problems);
  }
  return name;
}

// Names from `name:`. Unlike derived names, a clash is an error, not renamed away: the pattern is the user's to fix
// (by adding the keys that tell the trials apart).
void name_by_pattern(std::vector<Trial>& trials, const SweepSpec& spec, Problems& problems) {
  const Origin name_origin = parse_where(spec.name_where, spec.file);
  std::map<std::string, int> by_name;
  for (auto& t : trials) {
    t.name = safe_name(pattern_name(t, spec, name_origin, problems));
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
}

// Derived names: "<label><value>" joined by '-', e.g. "lr0.001-rank8"; a collision after making the names
// file-system safe gets the trial's index appended.
void name_by_values(std::vector<Trial>& trials, const SweepSpec& spec) {
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
}

}  // namespace

std::vector<Trial> expand(const SweepSpec& spec) {
  std::vector<Trial> trials = combine(spec);
  Problems problems;
  check_distinct_values(trials, spec, problems);
  problems.throw_if_any();
  if (!spec.name_pattern.empty()) {
    name_by_pattern(trials, spec, problems);
  } else {
    name_by_values(trials, spec);
  }
  return trials;
}

}  // namespace ft::sweep

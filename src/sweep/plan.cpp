#include "sweep/plan.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "config/derived_paths.h"
#include "metrics/record.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"

namespace fs = std::filesystem;

namespace ft::sweep {
namespace {

std::string key_of(const std::string& override_text) {
  return override_text.substr(0, override_text.find('='));
}

// The loader's message lines without its header, each `<override 'K=V'>` that came from the sweep file shown
// with its place there.
std::vector<std::string> problem_lines(const std::string& message,
                                       const std::map<std::string, std::string>& sweep_overrides) {
  std::vector<std::string> lines;
  std::istringstream in(message);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (first && line.rfind("invalid configuration", 0) == 0) {
      first = false;
      continue;
    }
    first = false;
    const size_t text = line.find_first_not_of(' ');
    if (text == std::string::npos) continue;
    line.erase(0, text);
    for (const auto& [override_text, where] : sweep_overrides) {
      const std::string shown = "<override '" + override_text + "'>";
      if (line.rfind(shown, 0) == 0) {
        line = where + " (" + override_text + ")" + line.substr(shown.size());
        break;
      }
    }
    lines.push_back(line);
  }
  return lines;
}

std::string mode_name(Mode m) {
  return m == Mode::kMin ? "min" : "max";
}

}  // namespace

Plan make_plan(const PlanOptions& options) {
  Plan plan;
  plan.spec = read_sweep_file(options.sweep_file);
  plan.base_config = options.base_config;
  plan.cli_overrides = options.overrides;
  const SweepSpec& spec = plan.spec;
  const std::vector<Trial> trials = expand(spec);

  // Command-line overrides go to every trial; they may not fight the sweep over its own keys.
  for (const auto& o : options.overrides) {
    const std::string key = key_of(o);
    if (key == "run.output_dir" || key == "run.name" || key == "checkpoint.resume" || key == "run.overwrite") {
      throw ConfigError("override '" + o + "': " + key + " is set by the sweep for every trial",
                        "choose the sweep directory with --out or the sweep file's output_dir");
    }
    for (const auto& swept : spec.swept_keys) {
      if (swept == key) {
        throw ConfigError("override '" + o + "': " + key + " is swept by " + spec.file.string(),
                          "drop it from the command line, or change its values in the sweep file");
      }
    }
  }

  std::string dir = options.out_dir;
  if (dir.empty()) dir = spec.output_dir;
  if (dir.empty()) dir = (fs::path("runs") / options.sweep_file.stem()).string();
  plan.dir = fs::absolute(dir).lexically_normal();

  std::map<std::string, std::string> sweep_overrides;  // override text -> where the sweep file gave it
  for (const auto& a : spec.set) sweep_overrides[a.override_text()] = a.where;
  for (const auto& t : trials) {
    TrialPlan tp;
    tp.trial = t;
    tp.dir = plan.dir / t.name;
    for (const auto& a : spec.set) tp.overrides.push_back(a.override_text());
    tp.overrides.insert(tp.overrides.end(), options.overrides.begin(), options.overrides.end());
    for (const auto& a : t.values) {
      tp.overrides.push_back(a.override_text());
      sweep_overrides[a.override_text()] = a.where;
    }
    tp.overrides.push_back("run.name=" + yaml_quote(t.name));
    tp.overrides.push_back("run.output_dir=" + yaml_quote(tp.dir.string()));
    tp.overrides.push_back("checkpoint.resume=auto");
    tp.overrides.push_back("run.overwrite=false");  // a rerun resumes an interrupted trial, never deletes it
    plan.trials.push_back(std::move(tp));
  }
  if (!options.validate) return plan;

  // Every trial's config before any trial runs: all problems at once, each with its trial.
  std::string report;
  size_t bad = 0;
  for (auto& tp : plan.trials) {
    std::vector<std::string> lines;
    try {
      tp.loaded = config::load_config(options.base_config, tp.overrides);
      config::fill_derived_paths(tp.loaded.config);  // as the trial will: its config.yaml names its files
      if (spec.metric.rfind(std::string(metrics::kEvalEvent) + ".", 0) == 0 && tp.loaded.config.data.eval.empty()) {
        lines.push_back((spec.metric_where.empty() ? spec.file.string() : spec.metric_where) +
                        ": metric: " + spec.metric + " needs evaluation data, and this trial's data.eval is empty");
      }
    } catch (const ConfigError& e) {
      if (std::string(e.what()).rfind("config file", 0) == 0) throw;  // the base config itself is missing
      lines = problem_lines(e.what(), sweep_overrides);
    }
    if (lines.empty()) continue;
    ++bad;
    report += fmt::format("\n  trial {} (#{}):", tp.trial.name, tp.trial.index);
    for (const auto& l : lines) report += "\n    " + l;
  }
  if (bad > 0) {
    throw ConfigError(fmt::format("invalid sweep: {} of {} trial configs have errors (nothing was started):{}", bad,
                                  plan.trials.size(), report),
                      "fix the base config, the sweep file or the overrides; `finetune sweep ... --list` shows "
                      "every trial's values");
  }
  return plan;
}

SweepRecord record_of(const Plan& plan) {
  SweepRecord r;
  r.base_config = fs::absolute(plan.base_config).lexically_normal().string();
  r.sweep_file = fs::absolute(plan.spec.file).lexically_normal().string();
  r.overrides = plan.cli_overrides;
  r.metric = plan.spec.metric;
  r.mode = plan.spec.mode;
  r.keys = plan.spec.swept_keys;
  for (const auto& tp : plan.trials) {
    Trial t = tp.trial;
    for (auto& a : t.values) a.where.clear();
    r.trials.push_back(std::move(t));
  }
  return r;
}

void write_record(const fs::path& dir, const SweepRecord& r) {
  nlohmann::json j;
  j["base_config"] = r.base_config;
  j["sweep_file"] = r.sweep_file;
  j["overrides"] = r.overrides;
  j["metric"] = r.metric;
  j["mode"] = mode_name(r.mode);
  j["keys"] = r.keys;
  j["trials"] = nlohmann::json::array();
  for (const auto& t : r.trials) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& a : t.values) values.push_back({{"key", a.key}, {"value", a.yaml}, {"display", a.display}});
    j["trials"].push_back({{"index", t.index}, {"name", t.name}, {"values", values}});
  }
  fs::create_directories(dir);
  // Array tasks on several hosts may write at once: write_file_atomic's temporary names are their own.
  write_file_atomic(dir / "sweep.json", j.dump(2) + "\n");
}

SweepRecord read_record(const fs::path& dir) {
  std::ifstream in(dir / "sweep.json");
  if (!in) {
    throw ConfigError("'" + dir.string() + "' holds no sweep (no sweep.json)",
                      "pass the sweep directory that `finetune sweep` printed (runs/<sweep> by default)");
  }
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("trials")) {
    throw Error("'" + (dir / "sweep.json").string() + "' is not a sweep record", "was it edited or truncated?");
  }
  SweepRecord r;
  r.base_config = j.value("base_config", "");
  r.sweep_file = j.value("sweep_file", "");
  r.overrides = j.value("overrides", std::vector<std::string>{});
  r.metric = j.value("metric", metrics::metric_name(metrics::kEvalEvent, metrics::kLoss));
  r.mode = j.value("mode", "min") == "max" ? Mode::kMax : Mode::kMin;
  r.keys = j.value("keys", std::vector<std::string>{});
  for (const auto& jt : j.at("trials")) {
    Trial t;
    t.index = jt.value("index", 0);
    t.name = jt.value("name", "");
    for (const auto& jv : jt.value("values", nlohmann::json::array())) {
      Assignment a;
      a.key = jv.value("key", "");
      a.yaml = jv.value("value", "");
      a.display = jv.value("display", a.yaml);
      t.values.push_back(std::move(a));
    }
    r.trials.push_back(std::move(t));
  }
  return r;
}

}  // namespace ft::sweep

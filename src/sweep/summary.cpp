#include "sweep/summary.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <functional>
#include <tuple>
#include <utility>

#include "metrics/metrics.h"
#include "metrics/plot.h"
#include "metrics/record.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"

namespace fs = std::filesystem;

namespace ft::sweep {
namespace {

std::optional<double> field(const nlohmann::json& line, const std::string& key) {
  const auto it = line.find(key);
  if (it == line.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string md_number(const std::optional<double>& v, const char* format = "{:.4g}") {
  return v ? fmt::format(fmt::runtime(format), *v) : "";
}

// Every digit: the shortest text that parses back to the same double.
std::string csv_number(const std::optional<double>& v) {
  return v ? fmt::format("{}", *v) : "";
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

std::string value_of(const Trial& t, const std::string& key) {
  for (const auto& a : t.values) {
    if (a.key == key) return a.display;
  }
  return "";
}

std::string values_text(const Trial& t) {
  std::string s;
  for (const auto& a : t.values) s += (s.empty() ? "" : " ") + a.key + "=" + a.display;
  return s.empty() ? "(base config)" : s;
}

std::string mode_name(Mode m) {
  return m == Mode::kMin ? "min" : "max";
}

// The table's columns after the swept values: header, Markdown alignment, and the cell of a row.
struct Column {
  std::string header;
  const char* align;
  std::function<std::string(const Row&)> cell;
};

std::vector<Column> table_columns(const SweepRecord& record) {
  const auto ranked = [](const Row& r) { return md_number(r.metric, "{:.6g}"); };
  std::vector<Column> columns = {
      {"status", "---", [](const Row& r) { return std::string(to_string(r.status)); }},
      {"steps", "--:", [](const Row& r) { return std::to_string(r.steps); }},
      {"train loss", "--:", [](const Row& r) { return md_number(r.train_loss); }},
      {"eval loss", "--:", [](const Row& r) { return md_number(r.eval_loss); }},
      {"perplexity", "--:", [](const Row& r) { return md_number(r.perplexity); }},
      {"exact match", "--:",
       [](const Row& r) { return r.exact_match ? fmt::format("{:.1f}%", 100.0 * *r.exact_match) : std::string(); }},
      {"tokens/s", "--:", [](const Row& r) { return md_number(r.tokens_per_s, "{:.0f}"); }},
      // Measured on GPUs only: a CPU trial logs 0, which reads "n/a" rather than a blank that looks like a gap.
      {"peak GiB", "--:",
       [](const Row& r) {
         if (!r.peak_memory_gib) return std::string();
         return *r.peak_memory_gib > 0 ? md_number(r.peak_memory_gib, "{:.2f}") : std::string("n/a");
       }},
      {"wall", "--:", [](const Row& r) { return r.wall_s > 0 ? metrics::format_duration(r.wall_s) : std::string(); }},
  };
  // The best-over-evaluations columns are the ranking metric itself when it is one of them (with the same mode):
  // that column is marked and shows the metric's digits instead of a second column repeating it.
  const std::string exact_match = metrics::metric_name(metrics::kEvalEvent, metrics::kExactMatch);
  static const std::vector<std::tuple<std::string, Mode, std::string>> kSameAsMetric = {
      {metrics::metric_name(metrics::kEvalEvent, metrics::kLoss), Mode::kMin, "eval loss"},
      {metrics::metric_name(metrics::kEvalEvent, metrics::kPerplexity), Mode::kMin, "perplexity"},
      {exact_match, Mode::kMax, "exact match"}};
  for (const auto& [metric, mode, header] : kSameAsMetric) {
    if (record.metric != metric || record.mode != mode) continue;
    for (auto& c : columns) {
      if (c.header != header) continue;
      c.header += " (ranked)";
      if (metric != exact_match) c.cell = ranked;  // exact match keeps its percentage
      return columns;
    }
  }
  columns.push_back({record.metric, "--:", ranked});
  return columns;
}

}  // namespace

std::string sweep_title(const fs::path& dir) {
  fs::path path = fs::absolute(dir).lexically_normal();  // "runs/lr/", "." and "lr/.." name their folder too
  if (!path.has_filename()) path = path.parent_path();
  const std::string name = path.filename().string();
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("sweep") != std::string::npos ? name : "Sweep " + name;
}

TrialMetrics read_trial_metrics(const fs::path& metrics_jsonl) {
  TrialMetrics m;
  std::ifstream in(metrics_jsonl);
  std::string text;
  while (std::getline(in, text)) {
    const auto line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer()) continue;
    const int64_t step = line["step"].get<int64_t>();
    const auto event = line.find("event");  // not json::value(): see text_of() in state.cpp
    if (event == line.end() || !event->is_string()) continue;
    if (*event == metrics::kTrainEvent) m.train[step] = line;
    if (*event == metrics::kEvalEvent) m.eval[step] = line;
  }
  return m;
}

std::vector<std::pair<int64_t, double>> metric_series(const TrialMetrics& trial, const std::string& metric) {
  const size_t dot = metric.find('.');
  const std::string event = metric.substr(0, dot);
  const std::string key = dot == std::string::npos ? std::string() : metric.substr(dot + 1);
  const auto& lines = event == metrics::kEvalEvent ? trial.eval : trial.train;
  std::vector<std::pair<int64_t, double>> out;
  if (event != metrics::kEvalEvent && event != metrics::kTrainEvent) return out;
  for (const auto& [step, line] : lines) {
    if (auto v = field(line, key)) out.emplace_back(step, *v);
  }
  return out;
}

std::optional<double> best_of(const std::vector<std::pair<int64_t, double>>& series, Mode mode) {
  std::optional<double> best;
  for (const auto& [step, v] : series) {
    if (!best || better(v, *best, mode)) best = v;
  }
  return best;
}

std::vector<Row> collect_rows(const fs::path& dir, const SweepRecord& record) {
  std::vector<Row> rows;
  const double now = unix_now();
  for (const auto& t : record.trials) {
    Row r;
    r.trial = t;
    const fs::path trial_dir = dir / t.name;
    r.state = read_state(trial_dir);
    r.status = observed_status(trial_dir, r.state);
    r.wall_s = r.state.wall_s;
    if (r.status == Status::kRunning && r.state.started > 0) r.wall_s += std::max(0.0, now - r.state.started);
    const TrialMetrics m = read_trial_metrics(trial_dir / "metrics.jsonl");
    if (!m.train.empty()) {
      r.steps = m.train.rbegin()->first;
      r.train_loss = field(m.train.rbegin()->second, metrics::kLoss);
      double sum = 0.0;
      int64_t n = 0;
      for (const auto& [step, line] : m.train) {
        if (auto v = field(line, metrics::kTokensPerS)) sum += *v, ++n;
        if (auto v = field(line, metrics::kPeakMemoryGib)) {
          if (!r.peak_memory_gib || *v > *r.peak_memory_gib) r.peak_memory_gib = v;
        }
      }
      if (n > 0) r.tokens_per_s = sum / static_cast<double>(n);
    }
    if (!m.eval.empty()) r.steps = std::max(r.steps, m.eval.rbegin()->first);
    r.eval_loss = best_of(metric_series(m, metrics::metric_name(metrics::kEvalEvent, metrics::kLoss)), Mode::kMin);
    r.perplexity =
        best_of(metric_series(m, metrics::metric_name(metrics::kEvalEvent, metrics::kPerplexity)), Mode::kMin);
    r.exact_match =
        best_of(metric_series(m, metrics::metric_name(metrics::kEvalEvent, metrics::kExactMatch)), Mode::kMax);
    r.metric = best_of(metric_series(m, record.metric), record.mode);
    rows.push_back(std::move(r));
  }
  // Sort key: finished trials with a value first, then other trials with one, then the rest; within each, the metric
  // (best first), a tie (exact match 100 % for several trials, say) to the lower eval loss, then the lower index.
  auto key = [&](const Row& r) {
    const int group = r.metric ? (r.status == Status::kFinished ? 0 : 1) : 2;
    const double metric = r.metric ? (record.mode == Mode::kMin ? *r.metric : -*r.metric) : 0.0;
    return std::make_tuple(group, metric, r.eval_loss.value_or(INFINITY), r.trial.index);
  };
  std::sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) { return key(a) < key(b); });
  if (!rows.empty() && rows.front().metric && rows.front().status == Status::kFinished) rows.front().best = true;
  return rows;
}

std::string counts_text(const std::vector<Row>& rows) {
  std::map<Status, int> counts;
  for (const auto& r : rows) ++counts[r.status];
  std::string s = fmt::format("{} trial{}", rows.size(), rows.size() == 1 ? "" : "s");
  std::string parts;
  for (const Status st : {Status::kFinished, Status::kRunning, Status::kFailed, Status::kInterrupted, Status::kPruned,
                          Status::kPending}) {
    if (counts[st] > 0) parts += (parts.empty() ? "" : ", ") + fmt::format("{} {}", counts[st], to_string(st));
  }
  return parts.empty() ? s : s + ": " + parts;
}

std::string render_markdown(const fs::path& dir, const SweepRecord& record, const std::vector<Row>& rows, bool png) {
  std::string md = "# " + sweep_title(dir) + "\n\n";
  md += "Base config `" + record.base_config + "`, sweep file `" + record.sweep_file + "`";
  if (!record.overrides.empty()) {
    md += ", overrides `";
    for (size_t i = 0; i < record.overrides.size(); ++i) md += (i ? " " : "") + record.overrides[i];
    md += "`";
  }
  md += ".\nRanked by `" + record.metric + "` (" + mode_name(record.mode) + ", the best value of each trial). " +
        counts_text(rows) + ".\n\n";
  const auto best = std::find_if(rows.begin(), rows.end(), [](const Row& r) { return r.best; });
  if (best != rows.end()) {
    md += fmt::format("**Best: {}** ({}): {} {:.6g}.\n\n", best->trial.name, values_text(best->trial), record.metric,
                      *best->metric);
  } else {
    md += "No finished trial has a value of the metric yet.\n\n";
  }
  const std::vector<Column> columns = table_columns(record);
  md += "| | trial |";
  for (const auto& k : record.keys) md += " " + md_cell(k) + " |";
  for (const auto& c : columns) md += " " + md_cell(c.header) + " |";
  md += "\n|---|---|";
  for (size_t i = 0; i < record.keys.size(); ++i) md += "---|";
  for (const auto& c : columns) md += std::string(c.align) + "|";
  md += "\n";
  for (const auto& r : rows) {
    md += std::string("| ") + (r.best ? "**best**" : "") + " | " +
          (r.best ? "**" + md_cell(r.trial.name) + "**" : md_cell(r.trial.name)) + " |";
    for (const auto& k : record.keys) md += " " + md_cell(value_of(r.trial, k)) + " |";
    for (const auto& c : columns) md += " " + md_cell(c.cell(r)) + " |";
    md += "\n";
  }
  std::string failed, pruned;
  for (const auto& r : rows) {
    if (r.status == Status::kFailed) {
      failed += fmt::format("- `{}` (#{}, {}): exit code {}: {}\n", r.trial.name, r.trial.index, values_text(r.trial),
                            r.state.exit_code, r.state.error.empty() ? "(no output)" : r.state.error);
    }
    if (r.status == Status::kPruned) {
      pruned += fmt::format("- `{}` (#{}): {}\n", r.trial.name, r.trial.index, r.state.error);
    }
  }
  if (!failed.empty()) md += "\n## Failed trials\n\n" + failed;
  if (!pruned.empty()) md += "\n## Stopped early (median stopping)\n\n" + pruned;
  md +=
      "\nEach trial is a `finetune train` run in its own directory (`<trial>/config.yaml`, `metrics.jsonl`, "
      "`output.log`, `trial.json`).\n";
  if (png) md += "\n![train and eval loss of every trial](summary.png)\n";
  return md;
}

std::string render_csv(const SweepRecord& record, const std::vector<Row>& rows) {
  std::string csv = "rank,best,index,name";
  for (const auto& k : record.keys) csv += "," + csv_field(k);
  csv +=
      ",status,steps,final_train_loss,best_eval_loss,best_perplexity,best_exact_match,tokens_per_s,"
      "peak_memory_gib,wall_s,metric,exit_code,error\n";
  int rank = 0;
  for (const auto& r : rows) {
    csv += fmt::format("{},{},{},{}", ++rank, r.best ? 1 : 0, r.trial.index, csv_field(r.trial.name));
    for (const auto& k : record.keys) csv += "," + csv_field(value_of(r.trial, k));
    const bool ended = r.status == Status::kFailed;
    csv += fmt::format(",{},{},{},{},{},{},{},{},{:.3f},{},{},{}\n", to_string(r.status), r.steps,
                       csv_number(r.train_loss), csv_number(r.eval_loss), csv_number(r.perplexity),
                       csv_number(r.exact_match), csv_number(r.tokens_per_s), csv_number(r.peak_memory_gib), r.wall_s,
                       csv_number(r.metric), ended ? std::to_string(r.state.exit_code) : "",
                       csv_field(ended || r.status == Status::kPruned ? r.state.error : ""));
  }
  return csv;
}

SummaryFiles write_summary(const fs::path& dir, const SweepRecord& record) {
  const std::vector<Row> rows = collect_rows(dir, record);
  SummaryFiles files{dir / "summary.md", dir / "summary.csv", dir / "summary.png"};
  std::vector<metrics::LabeledSeries> runs;
  for (const auto& r : rows) {
    metrics::LabeledSeries run;
    run.label = fmt::format("{}{}: {}", r.best ? "(best) " : "", r.trial.name, values_text(r.trial));
    const fs::path metrics = dir / r.trial.name / "metrics.jsonl";
    std::error_code ec;
    if (fs::exists(metrics, ec)) {
      try {
        run.series = metrics::read_metric_series(metrics);
      } catch (const Error&) {
        // A damaged file leaves this trial out of the plot; its row still shows what could be read.
      }
    }
    runs.push_back(std::move(run));
  }
  const bool any_loss = std::any_of(runs.begin(), runs.end(), [](const metrics::LabeledSeries& r) {
    return !r.series.train_loss.empty() || !r.series.eval_loss.empty();
  });
  if (!any_loss) {
    files.png.clear();  // nothing to draw yet
  } else if (!metrics::plotting_available()) {
    static bool warned = false;  // the summary is rewritten after every trial; say it once
    if (!std::exchange(warned, true))
      FT_LOG_WARN(
          "sweep: no {}: this build has no plotting (built without cairo); rebuild with libcairo2-dev installed",
          files.png.filename().string());
    files.png.clear();
  } else {
    try {
      metrics::plot_comparison(runs, files.png, sweep_title(dir) + ": " + counts_text(rows));
    } catch (const Error& e) {
      // The chart is an extra: the tables are still written, and the sweep goes on.
      FT_LOG_WARN("sweep: {} not written: {} ({})", files.png.filename().string(), e.what(), e.hint());
      files.png.clear();
    }
  }
  write_file_atomic(files.markdown, render_markdown(dir, record, rows, !files.png.empty()));
  write_file_atomic(files.csv, render_csv(record, rows));
  return files;
}

}  // namespace ft::sweep

// What a sweep produced, at a glance: one row per trial (its values, status, steps, final train loss, best eval
// loss / perplexity / exact match, tokens/s, peak memory, wall time and the ranking metric), sorted by the metric
// with the best finished trial marked; written as <sweep dir>/summary.md, summary.csv and summary.png.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sweep/plan.h"
#include "sweep/state.h"

namespace ft::sweep {

// A trial's metrics.jsonl by event: step -> the logged object. A step logged twice (a resumed run replays the
// steps after its checkpoint) keeps its last line; an unfinished last line is left out.
struct TrialMetrics {
  std::map<int64_t, nlohmann::json> train, eval;
};
TrialMetrics read_trial_metrics(const std::filesystem::path& metrics_jsonl);

// (step, value) of `metric` ("eval.loss": field "loss" of the eval events; "train.tokens_per_s": ...), in step order.
std::vector<std::pair<int64_t, double>> metric_series(const TrialMetrics& trial, const std::string& metric);
// The best value under `mode`; nullopt for an empty series.
std::optional<double> best_of(const std::vector<std::pair<int64_t, double>>& series, Mode mode);
// True when `a` is better than `b` under `mode`.
inline bool better(double a, double b, Mode mode) {
  return mode == Mode::kMin ? a < b : a > b;
}

struct Row {
  Trial trial;
  TrialState state;
  Status status = Status::kPending;       // as observed now (a stale "running" reads "interrupted")
  int64_t steps = 0;                      // the last step logged
  std::optional<double> train_loss;       // of the last train event
  std::optional<double> eval_loss;        // best (lowest) over the evaluations
  std::optional<double> perplexity;       // best (lowest)
  std::optional<double> exact_match;      // best (highest)
  std::optional<double> tokens_per_s;     // mean over the train events
  std::optional<double> peak_memory_gib;  // highest (0 on the CPU, where it is not measured: "n/a" in summary.md)
  std::optional<double> metric;           // the ranking metric's best value under the mode
  double wall_s = 0.0;                    // all attempts, the running one included
  bool best = false;                      // the best finished trial
};

// Rows of every trial of the sweep in `dir`, sorted: finished trials by the metric (best first; ties by the lower
// eval loss), then the others with a value, then those without (by index).
std::vector<Row> collect_rows(const std::filesystem::path& dir, const SweepRecord& record);

// The sweep's name in the summary's heading and chart title: its directory's name ("runs/lr/" -> "Sweep lr"), alone
// when it already says sweep ("runs/sweep" -> "sweep", "runs/demo-sweep" -> "demo-sweep", never "sweep sweep").
std::string sweep_title(const std::filesystem::path& dir);

// "4 trials: 2 finished, 1 running, 1 failed".
std::string counts_text(const std::vector<Row>& rows);

// The Markdown report (header, table, failures, stopped trials, the PNG when `png` is set). The table has one
// column per swept key, then status, steps, train loss, eval loss, perplexity, exact match, tokens/s, peak GiB
// ("n/a" on the CPU), wall time and the ranking metric; a metric that is one of the eval columns marks that
// column "(ranked)" instead of repeating it.
std::string render_markdown(const std::filesystem::path& dir, const SweepRecord& record, const std::vector<Row>& rows,
                            bool png);
// The CSV report, one line per row in the rows' order; numbers with every digit (they parse back exactly).
std::string render_csv(const SweepRecord& record, const std::vector<Row>& rows);

struct SummaryFiles {
  std::filesystem::path markdown, csv, png;  // png empty when no trial logged a loss yet
};
// Collects the rows and writes summary.md, summary.csv and summary.png into `dir` (atomically).
SummaryFiles write_summary(const std::filesystem::path& dir, const SweepRecord& record);

}  // namespace ft::sweep

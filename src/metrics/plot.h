// `finetune plot` and the sweep's comparison chart: loss, learning-rate and throughput curves from metrics.jsonl,
// drawn with cairo into a PNG, or an SVG when the output path ends in ".svg".
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace ft::metrics {

// The curves plot_metrics() draws, read from metrics.jsonl lines:
//   train loss / lr / tokens/s: lines whose "event" is not "eval", fields "loss", "lr", "tokens_per_s";
//   eval loss: lines with "event": "eval" and a field "loss" (or "eval_loss").
// x is the line's "step". Missing, null and non-finite values are left out.
struct MetricSeries {
  std::vector<std::pair<double, double>> train_loss, eval_loss, lr, tokens_per_s;
};

// Parses metrics.jsonl; throws ft::Error naming the file and line on malformed JSON or a missing file. A step logged
// twice (a resumed run replays the steps after its checkpoint) keeps its last value, so every curve is a function.
MetricSeries read_metric_series(const std::filesystem::path& metrics_jsonl);

// The ticks of one axis: round numbers 1, 2 or 5 x 10^k apart, the first at or below the data and the last at or
// above it, so the axis runs from tick to tick.
struct AxisTicks {
  double lo = 0, hi = 1, step = 1;  // the axis range (first and last tick) and the distance between ticks
  std::vector<double> values;       // lo, lo + step, ..., hi
  std::vector<std::string> labels;  // one per value, all with the same number of decimals
  std::string scale;                // "×10⁻³" when the labels show value / 10^-3 (tiny or huge values), else ""
};

// Ticks for data spanning [lo, hi]: at most max_ticks of them (at least 2). A zero-width range is widened around its
// value; with non_negative (a loss, a learning rate, a throughput) no tick lies below zero; min_step keeps the ticks
// at least that far apart (1 for steps). Non-finite bounds give the axis 0..1.
AxisTicks nice_ticks(double lo, double hi, int max_ticks, bool non_negative = false, double min_step = 0);

struct PlotInfo {
  int width = 0;
  int height = 0;
  size_t points = 0;  // points drawn over all curves
};

// False when this build has no cairo (FT_WITH_CAIRO=OFF): plot_metrics() and plot_comparison() then throw.
bool plotting_available();

// Three stacked panels sharing the step axis: loss (train and eval, with a legend), learning rate and tokens/s.
// Writes a PNG, or an SVG when `out` ends in ".svg", atomically. Throws ft::Error when the series are all empty
// ("no metrics to plot") or the file cannot be written.
PlotInfo plot_metrics(const MetricSeries& series, const std::filesystem::path& out, const std::string& title);

// One run of a comparison: its legend text and its curves.
struct LabeledSeries {
  std::string label;
  MetricSeries series;
};

// Two stacked panels comparing runs (`finetune sweep`): train loss and eval loss, one colour and dash pattern per
// run, and a legend of the labels below them (the first 40 runs). PNG or SVG as plot_metrics(). Throws ft::Error
// when no run has a loss.
PlotInfo plot_comparison(const std::vector<LabeledSeries>& runs, const std::filesystem::path& out,
                         const std::string& title);

}  // namespace ft::metrics

// `finetune plot`: loss, learning-rate and throughput curves of a run, drawn from metrics.jsonl into a PNG
// with a built-in rasterizer and bitmap font.
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

struct PlotInfo {
  int width = 0;
  int height = 0;
  size_t points = 0;  // points drawn over all curves
};

// Draws three stacked panels (loss with eval loss, lr, tokens/s) and writes a PNG to `png_out`.
// Throws ft::Error when the series are all empty ("no metrics to plot").
PlotInfo plot_metrics(const MetricSeries& series, const std::filesystem::path& png_out, const std::string& title);

// One run of a comparison: its legend text and its curves.
struct LabeledSeries {
  std::string label;
  MetricSeries series;
};

// Two stacked panels comparing runs (`finetune sweep`): train loss and eval loss, one colour per run, and a legend
// of the labels below them (the first 40 runs; colours repeat after 20). Throws ft::Error when no run has a loss.
PlotInfo plot_comparison(const std::vector<LabeledSeries>& runs, const std::filesystem::path& png_out,
                         const std::string& title);

}  // namespace ft::metrics

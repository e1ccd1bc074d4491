// `finetune plot` and the sweep's comparison chart: loss, learning-rate and throughput curves from metrics.jsonl,
// drawn with cairo into a PNG, an SVG or a PDF, as the output path's extension says.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace ft::metrics {

// The curves plot_metrics() draws, read from metrics.jsonl lines:
//   train loss / lr / tokens/s: lines whose "event" is not "eval", fields "loss", "lr", "tokens_per_s";
//   eval loss: lines with "event": "eval" and a field "loss" (or "eval_loss");
//   a preference run's (train.objective dpo, ipo, simpo, orpo) reward margin and accuracy: "rewards/margins" and
//   "rewards/accuracies" of the train and the eval lines.
// x is the line's "step". Missing, null and non-finite values are left out.
struct MetricSeries {
  std::vector<std::pair<double, double>> train_loss, eval_loss, lr, tokens_per_s;
  std::vector<std::pair<double, double>> reward_margins, eval_reward_margins, reward_accuracies, eval_reward_accuracies;
};

// Parses metrics.jsonl; throws ft::Error naming the file and line on malformed JSON or a missing file. A step logged
// twice (a resumed run replays the steps after its checkpoint) keeps its last value, so every curve is a function.
MetricSeries read_metric_series(const std::filesystem::path& metrics_jsonl);

// The ticks of one axis: round numbers 1, 2 or 5 x 10^k apart, the first at or below the data and the last at or
// above it, so the axis runs from tick to tick. A logarithmic axis (log_ticks) has ticks at 1, 2 and 5 x 10^k or at
// powers of ten instead, and step 0.
struct AxisTicks {
  double lo = 0, hi = 1, step = 1;  // the axis range (first and last tick) and the distance between ticks
  std::vector<double> values;       // lo, lo + step, ..., hi
  std::vector<std::string> labels;  // one per value, all with the same number of decimals
  std::string scale;                // "×10⁻³" when the labels show value / 10^-3 (tiny or huge values), else ""
  bool log = false;                 // positions are proportional to log10(value)
};

// Ticks for data spanning [lo, hi]: at most max_ticks of them (at least 2). A zero-width range is widened around its
// value; with non_negative (a loss, a learning rate, a throughput) no tick lies below zero; min_step keeps the ticks
// at least that far apart (1 for steps). Non-finite bounds give the axis 0..1.
AxisTicks nice_ticks(double lo, double hi, int max_ticks, bool non_negative = false, double min_step = 0);

// A loss that falls by more than this factor (one decade) is drawn on a logarithmic axis: on a linear one everything
// after the first drop is a flat line.
constexpr double kLogScaleRatio = 10;
// True when positive data spanning [lo, hi] is better read on a log axis (hi / lo > kLogScaleRatio).
bool wants_log_scale(double lo, double hi);
// Ticks of a logarithmic axis over positive [lo, hi]: the ends at 1, 2 or 5 x 10^k just outside the data, and
// between them 2 and 5 x 10^k as well as the powers of ten when max_ticks allows, else powers of ten only (every
// second, third... decade when there are many). Labels "0.5", "1", "20"; "10⁻⁶", "2×10⁻⁶" on every tick of an
// axis that reaches below 10^-4 or above 10^5. Non-positive or non-finite bounds give nice_ticks()' linear axis.
AxisTicks log_ticks(double lo, double hi, int max_ticks);

// The file formats cairo writes here, by the output's extension (case-insensitive): ".png", ".svg", ".pdf".
enum class ChartFormat { kPng, kSvg, kPdf };
// The format `out` names; throws ft::ConfigError (exit code 2) naming the extensions for any other (or none).
ChartFormat chart_format(const std::filesystem::path& out);

struct PlotInfo {
  int width = 0;  // pixels (a PDF page is width x height at 96 dpi: 0.75 points a pixel)
  int height = 0;
  size_t points = 0;                     // points drawn over all curves
  std::vector<AxisTicks> value_axes;     // each panel's value axis, top to bottom
  std::vector<std::string> axis_titles;  // and its title as drawn, e.g. "loss (log scale)"
};

// False when this build has no cairo (FT_WITH_CAIRO=OFF): plot_metrics() and plot_comparison() then throw.
bool plotting_available();

// Three stacked panels sharing the step axis: loss (train as a line, eval as ringed markers on top of it in a
// colour of their own, both in the legend; on a log axis when wants_log_scale()), learning rate and tokens/s (from
// zero, so a small wobble looks small). A preference run adds two panels under the loss, in the loss's colours (train
// line, eval markers): the reward margin (its axis goes below zero with the data) and the reward accuracy. Writes the
// chart_format() of `out` atomically. Throws ft::ConfigError for an unknown extension, ft::Error when the series are
// all empty ("no metrics to plot") or the file cannot be written.
PlotInfo plot_metrics(const MetricSeries& series, const std::filesystem::path& out, const std::string& title);

// One run of a comparison: its legend text and its curves.
struct LabeledSeries {
  std::string label;
  MetricSeries series;
};

// Two stacked panels comparing runs (`finetune sweep`): train loss and eval loss, one colour and dash pattern per
// run, and a legend of the labels below them (the first 40 runs); each loss axis logarithmic when wants_log_scale().
// Formats as plot_metrics(). Throws ft::Error when no run has a loss.
PlotInfo plot_comparison(const std::vector<LabeledSeries>& runs, const std::filesystem::path& out,
                         const std::string& title);

}  // namespace ft::metrics

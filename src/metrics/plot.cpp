#include "metrics/plot.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "metrics/record.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::metrics {
namespace {

using Points = std::vector<std::pair<double, double>>;

std::optional<double> number(const nlohmann::json& line, const char* key) {
  const auto it = line.find(key);
  if (it == line.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

// Sorts by step; of points with the same step only the one logged last stays.
void keep_last_per_step(Points& pts) {
  std::stable_sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Points out;
  for (const auto& p : pts) {
    if (!out.empty() && out.back().first == p.first) {
      out.back() = p;
    } else {
      out.push_back(p);
    }
  }
  pts = std::move(out);
}

std::string superscript(int n) {
  static const char* const kDigits[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string out = n < 0 ? "⁻" : "";
  for (const char c : std::to_string(std::abs(n))) out += kDigits[c - '0'];
  return out;
}

// Labels with as many decimals as the step needs; values far from 1 are shown scaled, the factor in t.scale.
void label_ticks(AxisTicks& t) {
  const double largest = std::max(std::abs(t.lo), std::abs(t.hi));
  int exponent = 0;
  if (largest > 0 && (largest < 1e-2 || largest >= 1e5))
    exponent = static_cast<int>(std::floor(std::log10(largest) + 1e-9));
  const double unit = std::pow(10.0, exponent);
  const int decimals = std::clamp(static_cast<int>(-std::floor(std::log10(t.step / unit) + 1e-9)), 0, 12);
  if (exponent != 0) t.scale = "×10" + superscript(exponent);
  for (const double v : t.values) {
    std::string label = fmt::format("{:.{}f}", v / unit, decimals);
    if (label.find_first_not_of("-0.") == std::string::npos && label[0] == '-') label.erase(0, 1);  // no "-0.0"
    t.labels.push_back(std::move(label));
  }
}

// A tick of a logarithmic axis: mantissa x 10^exponent, mantissa 1, 2 or 5.
struct LogTick {
  int exponent, mantissa;
  double value() const {  // divided for negative exponents: 2 / 10 is the double nearest 0.2, 2 * 0.1 is not
    return exponent >= 0 ? mantissa * std::pow(10.0, exponent) : mantissa / std::pow(10.0, -exponent);
  }
  int rank() const { return exponent * 3 + (mantissa == 1 ? 0 : mantissa == 2 ? 1 : 2); }  // consecutive ticks: +1
};

LogTick log_tick_of_rank(int rank) {
  const int exponent = rank >= 0 ? rank / 3 : -((-rank + 2) / 3);
  return {exponent, std::array<int, 3>{1, 2, 5}[static_cast<size_t>(rank - exponent * 3)]};
}

// The largest 1, 2 or 5 x 10^k at or below v (floor) or the smallest at or above it (ceil); v > 0.
LogTick log_tick_near(double v, bool ceil) {
  // From 5 x 10^(e+1), above v whichever way log10 rounds, down to the first tick at or below v.
  int rank = (static_cast<int>(std::floor(std::log10(v))) + 1) * 3 + 2;
  while (log_tick_of_rank(rank).value() > v) --rank;
  if (ceil && log_tick_of_rank(rank).value() < v) ++rank;
  return log_tick_of_rank(rank);
}

// Decimals ("0.05", "2", "300") on an axis within 10^-4..10^5; powers of ten ("10⁻⁵", "2×10⁻⁵") on one reaching
// further, for every label alike.
std::vector<std::string> log_labels(const std::vector<LogTick>& ticks) {
  const bool decimal =
      std::all_of(ticks.begin(), ticks.end(), [](const LogTick& t) { return t.exponent >= -4 && t.exponent <= 5; });
  std::vector<std::string> labels;
  for (const auto& t : ticks) {
    if (decimal || t.exponent == 0) {
      labels.push_back(fmt::format("{:.{}f}", t.value(), std::max(0, -t.exponent)));
    } else {
      labels.push_back((t.mantissa == 1 ? "" : std::to_string(t.mantissa) + "×") + "10" + superscript(t.exponent));
    }
  }
  return labels;
}

}  // namespace

MetricSeries read_metric_series(const std::filesystem::path& metrics_jsonl) {
  std::ifstream in(metrics_jsonl);
  if (!in)
    throw Error("cannot read '" + metrics_jsonl.string() + "'",
                "pass a run directory written by `finetune train` (it contains metrics.jsonl)");
  MetricSeries s;
  std::string text;
  for (int lineno = 1; std::getline(in, text); ++lineno) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object())
      throw Error(fmt::format("{}:{}: not a JSON object", metrics_jsonl.string(), lineno),
                  "metrics.jsonl holds one JSON object per line; was the file edited or truncated?");
    const auto step = number(line, "step");
    if (!step) continue;
    const auto event = line.find("event");
    const bool eval = event != line.end() && *event == kEvalEvent;
    if (eval) {
      auto loss = number(line, kLoss);
      if (!loss) loss = number(line, "eval_loss");
      if (loss) s.eval_loss.emplace_back(*step, *loss);
    } else {
      if (auto v = number(line, kLoss)) s.train_loss.emplace_back(*step, *v);
      if (auto v = number(line, kLr)) s.lr.emplace_back(*step, *v);
      if (auto v = number(line, kTokensPerS)) s.tokens_per_s.emplace_back(*step, *v);
    }
    if (auto v = number(line, kRewardMargins))
      (eval ? s.eval_reward_margins : s.reward_margins).emplace_back(*step, *v);
    if (auto v = number(line, kRewardAccuracies)) {
      (eval ? s.eval_reward_accuracies : s.reward_accuracies).emplace_back(*step, *v);
    }
  }
  for (Points* pts : {&s.train_loss, &s.eval_loss, &s.lr, &s.tokens_per_s, &s.reward_margins, &s.eval_reward_margins,
                      &s.reward_accuracies, &s.eval_reward_accuracies}) {
    keep_last_per_step(*pts);
  }
  return s;
}

AxisTicks nice_ticks(double lo, double hi, int max_ticks, bool non_negative, double min_step) {
  // Far enough from the double range that the padding and the tick arithmetic below cannot overflow.
  constexpr double kLimit = 1e300;
  max_ticks = std::max(max_ticks, 3);  // with 2, a range around zero (one tick each side) could never fit
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  lo = std::clamp(lo, -kLimit, kLimit);
  hi = std::clamp(hi, -kLimit, kLimit);
  if (non_negative) {
    lo = std::max(lo, 0.0);
    hi = std::max(hi, lo);
  }
  const double largest = std::max(std::abs(lo), std::abs(hi));
  if (hi - lo <= largest * 1e-9) {  // one value (or rounding noise around it): give it room on both sides
    const double pad = largest > 1e-300 ? largest * 0.1 : 1.0;
    lo = non_negative ? std::max(lo - pad, 0.0) : lo - pad;
    hi += pad;
  }
  const double raw = std::max((hi - lo) / (max_ticks - 1), std::isfinite(min_step) ? min_step : 0.0);
  double decade = std::pow(10.0, std::floor(std::log10(raw)));
  double step = decade, first = 0, last = 0;
  // The smallest of 1, 2, 5 x 10^k at least `raw` whose ticks, rounded outwards, still number max_ticks or fewer.
  for (int i = 0; i < 64; ++i) {
    step = decade * (i % 3 == 0 ? 1 : i % 3 == 1 ? 2 : 5);
    if (i % 3 == 2) decade *= 10;
    if (step < raw * (1 - 1e-12)) continue;
    first = std::floor(lo / step + 1e-9);
    last = std::ceil(hi / step - 1e-9);
    if (last - first <= max_ticks - 1) break;
  }
  AxisTicks t;
  t.step = step;
  for (int i = 0; i <= static_cast<int>(last - first); ++i) {
    const double v = (first + i) * step;
    t.values.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  t.lo = t.values.front();
  t.hi = t.values.back();
  label_ticks(t);
  return t;
}

bool wants_log_scale(double lo, double hi) {
  return std::isfinite(lo) && std::isfinite(hi) && lo > 0 && hi / lo > kLogScaleRatio;
}

AxisTicks log_ticks(double lo, double hi, int max_ticks) {
  if (lo > hi) std::swap(lo, hi);
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo <= 0) return nice_ticks(lo, hi, max_ticks, true);
  max_ticks = std::max(max_ticks, 3);
  lo = std::max(lo, 1e-300);
  hi = std::min(std::max(hi, lo), 1e300);
  int first = log_tick_near(lo, false).rank(), last = log_tick_near(hi, true).rank();
  if (first == last) --first, ++last;  // one value on a tick: room on both sides
  std::vector<LogTick> ticks;
  if (last - first + 1 <= max_ticks) {  // every 1, 2 and 5 between the ends
    for (int r = first; r <= last; ++r) ticks.push_back(log_tick_of_rank(r));
  } else {  // the ends, and the powers of ten between them: every `stride`-th decade, so they fit
    std::vector<int> powers;
    for (int r = first + 1; r < last; ++r) {
      if (log_tick_of_rank(r).mantissa == 1) powers.push_back(log_tick_of_rank(r).exponent);
    }
    const int room = max_ticks - 2, n = static_cast<int>(powers.size());
    const int stride = std::max(1, (n + room - 1) / room);
    ticks.push_back(log_tick_of_rank(first));
    for (const int e : powers) {
      if (e % stride == 0) ticks.push_back({e, 1});
    }
    ticks.push_back(log_tick_of_rank(last));
  }
  AxisTicks t;
  t.log = true;
  t.step = 0;
  for (const auto& tick : ticks) t.values.push_back(tick.value());
  t.labels = log_labels(ticks);
  t.lo = t.values.front();
  t.hi = t.values.back();
  return t;
}

ChartFormat chart_format(const std::filesystem::path& out) {
  std::string ext = out.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".png") return ChartFormat::kPng;
  if (ext == ".svg") return ChartFormat::kSvg;
  if (ext == ".pdf") return ChartFormat::kPdf;
  throw ConfigError(fmt::format("plot '{}': {} (expected .png, .svg or .pdf)", out.string(),
                                ext.empty() ? std::string("the file name has no extension")
                                            : "cannot write the format '" + ext + "'"),
                    "name the output file.png (an image), file.svg or file.pdf (vector, for documents)");
}

}  // namespace ft::metrics

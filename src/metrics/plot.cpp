#include "metrics/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

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
    const bool eval = event != line.end() && *event == "eval";
    if (eval) {
      auto loss = number(line, "loss");
      if (!loss) loss = number(line, "eval_loss");
      if (loss) s.eval_loss.emplace_back(*step, *loss);
      continue;
    }
    if (auto v = number(line, "loss")) s.train_loss.emplace_back(*step, *v);
    if (auto v = number(line, "lr")) s.lr.emplace_back(*step, *v);
    if (auto v = number(line, "tokens_per_s")) s.tokens_per_s.emplace_back(*step, *v);
  }
  for (Points* pts : {&s.train_loss, &s.eval_loss, &s.lr, &s.tokens_per_s}) keep_last_per_step(*pts);
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

}  // namespace ft::metrics

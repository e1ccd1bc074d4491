#include "metrics/plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>

#include <nlohmann/json.hpp>

#include "metrics/png.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::metrics {
namespace {

using Points = std::vector<std::pair<double, double>>;
struct Rgb {
  uint8_t r, g, b;
};

// 5x7 glyphs, one byte per row, bit 4 = leftmost column. Lowercase letters are drawn as capitals.
const std::array<uint8_t, 7>* glyph(char c) {
  static const std::array<std::array<uint8_t, 7>, 36> kAlnum = {{
      {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},
      {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},
      {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},
      {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},
      {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},
      {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E},
      {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}, {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C},
      {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}, {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10},
      {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}, {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11},
      {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}, {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},
      {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}, {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F},
      {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}, {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11},
      {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10},
      {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}, {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11},
      {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}, {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},
      {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04},
      {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}, {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11},
      {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}}};
  static const std::array<std::pair<char, std::array<uint8_t, 7>>, 17> kSymbols = {{
      {' ', {0, 0, 0, 0, 0, 0, 0}},
      {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},
      {'-', {0, 0, 0, 0x1F, 0, 0, 0}},
      {'+', {0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0}},
      {'/', {0, 0x01, 0x02, 0x04, 0x08, 0x10, 0}},
      {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},
      {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
      {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
      {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
      {'_', {0, 0, 0, 0, 0, 0, 0x1F}},
      {'=', {0, 0, 0x1F, 0, 0x1F, 0, 0}},
      {',', {0, 0, 0, 0, 0x0C, 0x04, 0x08}},
      {'|', {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
      {'[', {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E}},
      {']', {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E}},
      {'#', {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A}},
      {'?', {0x0E, 0x11, 0x01, 0x02, 0x04, 0, 0x04}}}};
  if (c >= '0' && c <= '9') return &kAlnum[static_cast<size_t>(c - '0')];
  if (c >= 'A' && c <= 'Z') return &kAlnum[static_cast<size_t>(10 + c - 'A')];
  if (c >= 'a' && c <= 'z') return &kAlnum[static_cast<size_t>(10 + c - 'a')];
  for (const auto& [ch, rows] : kSymbols)
    if (ch == c) return &rows;
  return &kSymbols.back().second;
}

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w) * static_cast<size_t>(h) * 3, 255) {}
  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
    const size_t i = (static_cast<size_t>(y) * static_cast<size_t>(w_) + static_cast<size_t>(x)) * 3;
    px_[i] = c.r;
    px_[i + 1] = c.g;
    px_[i + 2] = c.b;
  }
  void fill(int x0, int y0, int x1, int y1, Rgb c) {
    for (int y = y0; y <= y1; ++y)
      for (int x = x0; x <= x1; ++x) set(x, y, c);
  }
  // Bresenham, drawn `thick` pixels wide.
  void line(int x0, int y0, int x1, int y1, Rgb c, int thick = 1) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (;;) {
      fill(x0 - thick / 2, y0 - thick / 2, x0 + (thick - 1) / 2, y0 + (thick - 1) / 2, c);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) { err += dy; x0 += sx; }
      if (e2 <= dx) { err += dx; y0 += sy; }
    }
  }
  // Text with its top-left corner at (x, y), glyphs scaled by `scale`.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 1) {
    for (char ch : s) {
      const auto& rows = *glyph(ch);
      for (int r = 0; r < 7; ++r)
        for (int col = 0; col < 5; ++col)
          if (rows[static_cast<size_t>(r)] & (0x10 >> col)) fill(x + col * scale, y + r * scale, x + col * scale + scale - 1, y + r * scale + scale - 1, c);
      x += 6 * scale;
    }
  }
  static int text_width(const std::string& s, int scale = 1) { return static_cast<int>(s.size()) * 6 * scale; }
  const std::vector<uint8_t>& pixels() const { return px_; }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;  // RGB rows
};

std::string tick_label(double v) {
  const double a = std::abs(v);
  if (a != 0.0 && (a < 1e-2 || a >= 1e5)) return fmt::format("{:.1e}", v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

constexpr Rgb kBlack{0, 0, 0}, kGrid{225, 225, 225}, kGray{110, 110, 110};

// One panel: frame, grid, ticks, and each series as a polyline (single points as small squares).
size_t draw_panel(Canvas& cv, int x0, int y0, int x1, int y1, const std::string& title,
                  const std::vector<std::pair<const Points*, Rgb>>& series, const std::vector<std::string>& legend) {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const auto& [pts, color] : series)
    for (const auto& [x, y] : *pts) {
      xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  cv.text(x0, y0 - 22, title, kBlack, 2);
  for (size_t i = 0; i < legend.size(); ++i) {
    const int lx = x1 - 160 * static_cast<int>(legend.size() - i);
    cv.fill(lx, y0 - 16, lx + 14, y0 - 12, series[i].second);
    cv.text(lx + 20, y0 - 18, legend[i], kBlack);
  }
  cv.line(x0, y0, x1, y0, kBlack);
  cv.line(x0, y1, x1, y1, kBlack);
  cv.line(x0, y0, x0, y1, kBlack);
  cv.line(x1, y0, x1, y1, kBlack);
  if (!std::isfinite(xmin)) {
    cv.text((x0 + x1) / 2 - Canvas::text_width("no data", 2) / 2, (y0 + y1) / 2 - 7, "no data", kGray, 2);
    return 0;
  }
  if (ymax - ymin < 1e-12 * std::max(1.0, std::abs(ymax))) {  // flat series: give it some room
    const double pad = std::abs(ymax) > 0 ? std::abs(ymax) * 0.05 : 1.0;
    ymin -= pad, ymax += pad;
  } else {
    const double pad = (ymax - ymin) * 0.05;
    ymin -= pad, ymax += pad;
  }
  if (xmax <= xmin) xmin -= 1, xmax += 1;
  auto px = [&](double x) { return x0 + 1 + static_cast<int>(std::lround((x - xmin) / (xmax - xmin) * (x1 - x0 - 2))); };
  auto py = [&](double y) { return y1 - 1 - static_cast<int>(std::lround((y - ymin) / (ymax - ymin) * (y1 - y0 - 2))); };
  for (int k = 0; k <= 4; ++k) {  // y grid and labels
    const double v = ymin + (ymax - ymin) * k / 4.0;
    const int y = py(v);
    if (k > 0 && k < 4) cv.line(x0 + 1, y, x1 - 1, y, kGrid);
    const std::string label = tick_label(v);
    cv.text(x0 - 6 - Canvas::text_width(label), y - 3, label, kGray);
  }
  for (int k = 0; k <= 5; ++k) {  // x grid and step labels
    const double v = xmin + (xmax - xmin) * k / 5.0;
    const int x = px(v);
    if (k > 0 && k < 5) cv.line(x, y0 + 1, x, y1 - 1, kGrid);
    const std::string label = fmt::format("{:.0f}", v);
    cv.text(x - Canvas::text_width(label) / 2, y1 + 6, label, kGray);
  }
  size_t drawn = 0;
  for (const auto& [pts, color] : series) {
    for (size_t i = 0; i < pts->size(); ++i) {
      const int x = px((*pts)[i].first), y = py((*pts)[i].second);
      if (i > 0) cv.line(px((*pts)[i - 1].first), py((*pts)[i - 1].second), x, y, color, 2);
      if (pts->size() < 60) cv.fill(x - 2, y - 2, x + 2, y + 2, color);
      ++drawn;
    }
  }
  return drawn;
}

std::optional<double> number(const nlohmann::json& line, const char* key) {
  if (!line.contains(key) || !line[key].is_number()) return std::nullopt;
  const double v = line[key].get<double>();
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

PlotInfo plot_metrics(const MetricSeries& s, const std::filesystem::path& png_out, const std::string& title) {
  if (s.train_loss.empty() && s.eval_loss.empty() && s.lr.empty() && s.tokens_per_s.empty())
    throw Error("no metrics to plot", "the run has not logged a step yet; plot again after the first log line");
  constexpr int kW = 960, kPanel = 230, kTop = 60, kGap = 70, kLeft = 90, kRight = 30;
  const int height = kTop + 3 * kPanel + 3 * kGap;
  Canvas cv(kW, height);
  cv.text(kLeft, 14, title, kBlack, 2);
  const Rgb blue{31, 119, 180}, red{214, 39, 40}, green{44, 160, 44}, orange{255, 127, 14};
  PlotInfo info{kW, height, 0};
  int y = kTop + 30;
  info.points += draw_panel(cv, kLeft, y, kW - kRight, y + kPanel, "loss",
                            {{&s.train_loss, blue}, {&s.eval_loss, red}}, {"train", "eval"});
  y += kPanel + kGap;
  info.points += draw_panel(cv, kLeft, y, kW - kRight, y + kPanel, "learning rate", {{&s.lr, green}}, {});
  y += kPanel + kGap;
  info.points += draw_panel(cv, kLeft, y, kW - kRight, y + kPanel, "tokens/s", {{&s.tokens_per_s, orange}}, {});
  cv.text(kW / 2 - Canvas::text_width("step") / 2, height - 16, "step", kGray);
  write_png_rgb(png_out, kW, height, cv.pixels());
  return info;
}

PlotInfo plot_comparison(const std::vector<LabeledSeries>& runs, const std::filesystem::path& png_out,
                         const std::string& title) {
  const bool any = std::any_of(runs.begin(), runs.end(), [](const LabeledSeries& r) {
    return !r.series.train_loss.empty() || !r.series.eval_loss.empty();
  });
  if (!any) throw Error("no losses to plot", "no trial has logged a step yet");
  // Tableau 20: the ten strong colours, then their light partners.
  static const std::array<Rgb, 20> kPalette = {{{31, 119, 180},  {255, 127, 14},  {44, 160, 44},   {214, 39, 40},
                                                {148, 103, 189}, {140, 86, 75},   {227, 119, 194}, {127, 127, 127},
                                                {188, 189, 34},  {23, 190, 207},  {174, 199, 232}, {255, 187, 120},
                                                {152, 223, 138}, {255, 152, 150}, {197, 176, 213}, {196, 156, 148},
                                                {247, 182, 210}, {199, 199, 199}, {219, 219, 141}, {158, 218, 229}}};
  constexpr size_t kMaxLegend = 40;
  constexpr int kW = 960, kPanel = 260, kTop = 60, kGap = 70, kLeft = 90, kRight = 30, kLine = 13;
  const size_t legend_rows = std::min(runs.size(), kMaxLegend) + (runs.size() > kMaxLegend ? 1 : 0);
  const int height = kTop + 2 * kPanel + 2 * kGap + 30 + static_cast<int>(legend_rows) * kLine + 20;
  Canvas cv(kW, height);
  cv.text(kLeft, 14, title, kBlack, 2);
  std::vector<std::pair<const Points*, Rgb>> train, eval;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Rgb color = kPalette[i % kPalette.size()];
    train.emplace_back(&runs[i].series.train_loss, color);
    eval.emplace_back(&runs[i].series.eval_loss, color);
  }
  PlotInfo info{kW, height, 0};
  int y = kTop + 30;
  info.points += draw_panel(cv, kLeft, y, kW - kRight, y + kPanel, "train loss", train, {});
  y += kPanel + kGap;
  info.points += draw_panel(cv, kLeft, y, kW - kRight, y + kPanel, "eval loss", eval, {});
  y += kPanel + 30;
  cv.text(kW / 2 - Canvas::text_width("step") / 2, y - 8, "step", kGray);
  y += 12;
  const size_t max_chars = static_cast<size_t>((kW - kRight - kLeft - 24) / 6);
  for (size_t i = 0; i < runs.size() && i < kMaxLegend; ++i) {
    const Rgb color = kPalette[i % kPalette.size()];
    cv.fill(kLeft, y + 1, kLeft + 14, y + 5, color);
    std::string label = runs[i].label;
    if (label.size() > max_chars) label = label.substr(0, max_chars - 3) + "...";
    cv.text(kLeft + 22, y, label, kBlack);
    y += kLine;
  }
  if (runs.size() > kMaxLegend) cv.text(kLeft + 22, y, fmt::format("... and {} more", runs.size() - kMaxLegend), kGray);
  write_png_rgb(png_out, kW, height, cv.pixels());
  return info;
}

}  // namespace ft::metrics

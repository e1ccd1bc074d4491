// The charts of plot.h drawn with cairo: an RGB image surface written as PNG, or an SVG or PDF surface.
#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "metrics/plot.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"

namespace ft::metrics {
namespace {

using Points = std::vector<std::pair<double, double>>;

// Tableau 10, the palette of matplotlib and most report tooling.
constexpr std::array<int, 10> kPalette = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                          0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
constexpr int kTrainColor = 0x1f77b4, kEvalColor = 0xd62728, kLrColor = 0x2ca02c, kTokensColor = 0xff7f0e;
constexpr int kText = 0x222222, kMuted = 0x555555, kFrame = 0x888888, kGrid = 0xe6e6e6, kLegendBorder = 0xcccccc;
constexpr int kWidth = 960, kLeft = 96, kRight = 28, kTop = 56, kXLabels = 22, kPanelGap = 34;
constexpr double kInset = 8;
constexpr size_t kMarkAtMost = 60;  // sparser curves mark their points, so single points and gaps stay visible
constexpr double kPdfPointsPerPixel = 0.75;  // 72 points an inch over 96 pixels: the PDF page is the SVG's size

struct Curve {
  const Points* points;
  int color;
  std::string label;     // legend text
  int dash = 0;          // index into kDashes
  bool markers = false;  // mark every point with a ringed dot, drawn over every line (eval losses: few, far apart)
};

// How a panel's value axis is chosen from its data.
enum class ValueAxis {
  kData,       // round ticks around the data (never below zero)
  kFromZero,   // from zero up: a throughput's few percent of wobble stays a few percent of the height
  kLogIfWide,  // logarithmic when the data span more than kLogScaleRatio (a loss), else as kData
  kSigned,     // round ticks around the data, below zero too (a reward margin)
};

struct Panel {
  std::string y_label;
  std::vector<Curve> curves;
  bool legend = false;  // a legend box in the top right corner
  ValueAxis axis = ValueAxis::kData;
};

struct Rect {
  double x, y, w, h;
};

using SurfacePtr = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;
using ContextPtr = std::unique_ptr<cairo_t, decltype(&cairo_destroy)>;

cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

// The surface for `format`, `width` x `height` pixels (a PDF page in points: its Canvas scales by kPdfPointsPerPixel);
// SVG and PDF write into `stream`.
cairo_surface_t* create_surface(ChartFormat format, std::string* stream, int width, int height) {
  switch (format) {
    case ChartFormat::kSvg: {
      cairo_surface_t* svg = cairo_svg_surface_create_for_stream(append, stream, width, height);
      cairo_svg_surface_set_document_unit(svg, CAIRO_SVG_UNIT_PX);
      return svg;
    }
    case ChartFormat::kPdf:
      return cairo_pdf_surface_create_for_stream(append, stream, width * kPdfPointsPerPixel,
                                                 height * kPdfPointsPerPixel);
    case ChartFormat::kPng:
      break;
  }
  return cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
}

// The drawing target, in pixels: an image (PNG), or an SVG or PDF document held in memory until finish() writes it
// to `out`.
class Canvas {
 public:
  Canvas(std::filesystem::path out, int width, int height)
      : out_(std::move(out)),
        format_(chart_format(out_)),
        surface_(create_surface(format_, &vector_bytes_, width, height), cairo_surface_destroy),
        cr_(cairo_create(surface_.get()), cairo_destroy) {
    if (format_ == ChartFormat::kPdf) cairo_scale(cr_.get(), kPdfPointsPerPixel, kPdfPointsPerPixel);
    cairo_set_source_rgb(cr_.get(), 1, 1, 1);
    cairo_paint(cr_.get());
  }
  cairo_t* cr() const { return cr_.get(); }

  void finish() {
    check(cairo_status(cr_.get()), "drawing");
    std::string bytes;
    if (format_ == ChartFormat::kPng) {
      check(cairo_surface_write_to_png_stream(surface_.get(), append, &bytes), "encoding PNG");
    } else {
      cr_.reset();
      cairo_surface_finish(surface_.get());
      check(cairo_surface_status(surface_.get()), format_ == ChartFormat::kSvg ? "writing SVG" : "writing PDF");
      bytes = std::move(vector_bytes_);
    }
    write_file_atomic(out_, bytes);
  }

 private:
  void check(cairo_status_t status, const char* what) const {
    if (status != CAIRO_STATUS_SUCCESS)
      throw Error(fmt::format("plot '{}': cairo failed {}: {}", out_.string(), what, cairo_status_to_string(status)),
                  "the chart is drawn in memory and nothing was written; free some memory and plot again, or "
                  "write an .svg instead");
  }

  std::filesystem::path out_;
  ChartFormat format_;
  std::string vector_bytes_;  // before surface_: an SVG or PDF surface writes into it until it is destroyed
  SurfacePtr surface_;
  ContextPtr cr_;
};

void set_color(cairo_t* cr, int hex, double alpha = 1.0) {
  cairo_set_source_rgba(cr, ((hex >> 16) & 255) / 255.0, ((hex >> 8) & 255) / 255.0, (hex & 255) / 255.0, alpha);
}

void set_font(cairo_t* cr, double size, bool bold = false, bool italic = false) {
  cairo_select_font_face(cr, "sans-serif", italic ? CAIRO_FONT_SLANT_ITALIC : CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double text_width(cairo_t* cr, const std::string& s) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  return e.x_advance;
}

// `s` shortened with "…" (whole UTF-8 characters) until it fits `width`.
std::string fit(cairo_t* cr, std::string s, double width) {
  if (text_width(cr, s) <= width) return s;
  while (!s.empty() && text_width(cr, s + "…") > width) {
    s.pop_back();
    while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();
  }
  return s + "…";
}

// Draws `s` so that the point (x, y) is at fraction (ax, ay) of its box: (0, 0) top left, (0.5, 0.5) centre.
void draw_text(cairo_t* cr, const std::string& s, double x, double y, double ax, double ay) {
  cairo_font_extents_t f;
  cairo_font_extents(cr, &f);
  const double top = y - ay * (f.ascent + f.descent);
  cairo_move_to(cr, x - ax * text_width(cr, s), top + f.ascent);
  cairo_show_text(cr, s.c_str());
}

void set_line_style(cairo_t* cr, int color, int dash, double width) {
  static const std::array<std::vector<double>, 4> kDashes = {{{}, {7, 4}, {2, 3}, {9, 3, 2, 3}}};
  const auto& d = kDashes[static_cast<size_t>(dash) % kDashes.size()];
  set_color(cr, color);
  cairo_set_line_width(cr, width);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  cairo_set_dash(cr, d.data(), static_cast<int>(d.size()), 0);
}

bool finite(const std::pair<double, double>& p) {
  return std::isfinite(p.first) && std::isfinite(p.second);
}

size_t finite_points(const Points& pts) {
  return static_cast<size_t>(std::count_if(pts.begin(), pts.end(), finite));
}

// The step axis all panels share, over every finite point.
AxisTicks step_ticks(const std::vector<Panel>& panels) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& panel : panels)
    for (const auto& c : panel.curves)
      for (const auto& p : *c.points)
        if (finite(p)) lo = std::min(lo, p.first), hi = std::max(hi, p.first);
  return lo <= hi ? nice_ticks(lo, hi, 9, /*non_negative=*/true, /*min_step=*/1) : nice_ticks(0, 1, 9, true, 1);
}

// A ringed dot: white under the colour, so an eval point reads against the line it sits on.
void draw_marker(cairo_t* cr, double x, double y, double radius, int color) {
  set_color(cr, 0xffffff);
  cairo_new_sub_path(cr);
  cairo_arc(cr, x, y, radius + 1.5, 0, 2 * M_PI);
  cairo_fill(cr);
  set_color(cr, color);
  cairo_new_sub_path(cr);
  cairo_arc(cr, x, y, radius, 0, 2 * M_PI);
  cairo_fill(cr);
}

void draw_legend(cairo_t* cr, const Rect& area, const std::vector<const Curve*>& entries) {
  constexpr double kPad = 8, kRow = 18, kSwatch = 24;
  set_font(cr, 12);
  double text_w = 0;
  for (const Curve* c : entries) text_w = std::max(text_w, text_width(cr, c->label));
  const double w = kPad * 2 + kSwatch + 6 + text_w, h = kPad * 2 + kRow * static_cast<double>(entries.size());
  const double x = area.x + area.w - w - 8, y = area.y + 8;
  cairo_rectangle(cr, std::round(x) + 0.5, std::round(y) + 0.5, std::round(w), std::round(h));
  set_color(cr, 0xffffff, 0.9);
  cairo_fill_preserve(cr);
  set_color(cr, kLegendBorder);
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);
  for (size_t i = 0; i < entries.size(); ++i) {
    const double cy = y + kPad + kRow * (static_cast<double>(i) + 0.5);
    set_line_style(cr, entries[i]->color, entries[i]->dash, 2);
    cairo_move_to(cr, x + kPad, cy);
    cairo_line_to(cr, x + kPad + kSwatch, cy);
    cairo_stroke(cr);
    if (entries[i]->markers) draw_marker(cr, x + kPad + kSwatch / 2, cy, 4, entries[i]->color);
    set_color(cr, kText);
    draw_text(cr, entries[i]->label, x + kPad + kSwatch + 6, cy, 0, 0.5);
  }
}

// The value axis of a panel (0..1 when it has no data). Losses, learning rates and throughputs are never negative:
// the axis stops at zero, unless the panel is kSigned.
AxisTicks value_ticks(const Panel& panel) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& c : panel.curves)
    for (const auto& p : *c.points)
      if (finite(p)) lo = std::min(lo, p.second), hi = std::max(hi, p.second);
  if (lo > hi) return nice_ticks(0, 1, 6, true);
  if (panel.axis == ValueAxis::kLogIfWide && wants_log_scale(lo, hi)) return log_ticks(lo, hi, 6);
  return nice_ticks(panel.axis == ValueAxis::kFromZero ? 0.0 : lo, hi, 6,
                    /*non_negative=*/panel.axis != ValueAxis::kSigned);
}

// What the value axis says: its name, "log scale", and the factor of scaled labels.
std::string axis_title(const Panel& panel, const AxisTicks& yt) {
  std::string notes = yt.log ? "log scale" : "";
  if (!yt.scale.empty()) notes += (notes.empty() ? "" : ", ") + yt.scale;
  return panel.y_label + (notes.empty() ? "" : " (" + notes + ")");
}

// Grid, frame, tick labels, the axis title rotated with its baseline at x = title_x, and the curves: their lines
// first, then their markers, so no line hides a marked point. Returns the points drawn.
size_t draw_panel(cairo_t* cr, const Rect& area, const Panel& panel, const AxisTicks& xt, const AxisTicks& yt,
                  double title_x, double line_width) {
  const bool empty = std::none_of(panel.curves.begin(), panel.curves.end(),
                                  [](const Curve& c) { return finite_points(*c.points) > 0; });
  // The first and last ticks sit a few pixels inside the frame, so a curve at the end of its range stays visible.
  const Rect in{area.x + kInset, area.y + kInset, area.w - 2 * kInset, area.h - 2 * kInset};
  const auto along = [&](double y) { return yt.log ? std::log10(y) : y; };
  const auto px = [&](double x) { return in.x + (x - xt.lo) / (xt.hi - xt.lo) * in.w; };
  const auto py = [&](double y) {
    return in.y + in.h - (along(y) - along(yt.lo)) / (along(yt.hi) - along(yt.lo)) * in.h;
  };

  cairo_set_line_width(cr, 1);
  set_color(cr, kGrid);
  for (const double v : yt.values) {
    cairo_move_to(cr, area.x, std::round(py(v)) + 0.5);
    cairo_line_to(cr, area.x + area.w, std::round(py(v)) + 0.5);
  }
  for (const double v : xt.values) {
    cairo_move_to(cr, std::round(px(v)) + 0.5, area.y);
    cairo_line_to(cr, std::round(px(v)) + 0.5, area.y + area.h);
  }
  cairo_stroke(cr);
  set_color(cr, kFrame);
  cairo_rectangle(cr, area.x + 0.5, area.y + 0.5, area.w, area.h);
  cairo_stroke(cr);

  set_font(cr, 11);
  set_color(cr, kMuted);
  for (size_t i = 0; i < yt.values.size() && !empty; ++i)
    draw_text(cr, yt.labels[i], area.x - 7, py(yt.values[i]), 1, 0.5);
  for (size_t i = 0; i < xt.values.size(); ++i)
    draw_text(cr, xt.labels[i], px(xt.values[i]), area.y + area.h + 5, 0.5, 0);
  set_font(cr, 13);
  set_color(cr, kText);
  cairo_save(cr);
  cairo_translate(cr, title_x, area.y + area.h / 2);
  cairo_rotate(cr, -M_PI / 2);
  draw_text(cr, fit(cr, axis_title(panel, yt), area.h), 0, 0, 0.5, 1);
  cairo_restore(cr);
  if (empty) {
    set_font(cr, 15, false, true);
    set_color(cr, kMuted);
    draw_text(cr, "no data", area.x + area.w / 2, area.y + area.h / 2, 0.5, 0.5);
    return 0;
  }

  size_t drawn = 0;
  cairo_save(cr);
  cairo_rectangle(cr, area.x - 6, area.y - 6, area.w + 12, area.h + 12);  // points on the frame stay whole
  cairo_clip(cr);
  std::vector<const Curve*> legend;
  for (const auto& c : panel.curves) {
    const size_t n = finite_points(*c.points);
    if (n == 0) continue;
    legend.push_back(&c);
    set_line_style(cr, c.color, c.dash, line_width);
    bool started = false;
    for (const auto& p : *c.points) {
      if (!finite(p)) continue;
      if (started) {
        cairo_line_to(cr, px(p.first), py(p.second));
      } else {
        cairo_move_to(cr, px(p.first), py(p.second));
        started = true;
      }
    }
    cairo_stroke(cr);
    if (!c.markers && n <= kMarkAtMost) {
      for (const auto& p : *c.points) {
        if (!finite(p)) continue;
        cairo_new_sub_path(cr);
        cairo_arc(cr, px(p.first), py(p.second), line_width + 1.5, 0, 2 * M_PI);
      }
      cairo_fill(cr);
    }
    drawn += n;
  }
  for (const Curve* c : legend) {
    if (!c->markers) continue;
    for (const auto& p : *c->points) {
      if (finite(p)) draw_marker(cr, px(p.first), py(p.second), line_width + 2.5, c->color);
    }
  }
  cairo_restore(cr);
  if (panel.legend && !legend.empty()) draw_legend(cr, area, legend);
  return drawn;
}

// Title, then the panels stacked, each with the step axis under it and "step" under the last; returns the points
// drawn and the value axes' titles.
PlotInfo draw_panels(cairo_t* cr, const std::string& title, const std::vector<Panel>& panels, double panel_h,
                     double line_width) {
  set_font(cr, 18, true);
  set_color(cr, kText);
  const double plot_w = kWidth - kLeft - kRight;
  draw_text(cr, fit(cr, title, kWidth - 2.0 * kRight), kLeft + plot_w / 2, kTop / 2.0, 0.5, 0.5);
  const AxisTicks xt = step_ticks(panels);
  std::vector<AxisTicks> yts;
  set_font(cr, 11);
  double label_w = 0;  // the widest value label: the axis titles line up just left of all of them
  for (const auto& panel : panels) {
    yts.push_back(value_ticks(panel));
    for (const auto& label : yts.back().labels) label_w = std::max(label_w, text_width(cr, label));
  }
  const double title_x = std::max(24.0, kLeft - 7 - label_w - 10);
  PlotInfo info;
  double y = kTop;
  for (size_t i = 0; i < panels.size(); ++i) {
    info.points += draw_panel(cr, {kLeft, y, plot_w, panel_h}, panels[i], xt, yts[i], title_x, line_width);
    info.axis_titles.push_back(axis_title(panels[i], yts[i]));
    info.value_axes.push_back(yts[i]);
    y += panel_h + kXLabels + kPanelGap;
  }
  y -= kPanelGap;
  set_font(cr, 13);
  set_color(cr, kText);
  draw_text(cr, "step", kLeft + plot_w / 2, y + 4, 0.5, 0);
  return info;
}

}  // namespace

bool plotting_available() {
  return true;
}

PlotInfo plot_metrics(const MetricSeries& s, const std::filesystem::path& out, const std::string& title) {
  if (finite_points(s.train_loss) + finite_points(s.eval_loss) + finite_points(s.lr) + finite_points(s.tokens_per_s) ==
      0)
    throw Error("no metrics to plot", "the run has not logged a step yet; plot again after the first log line");
  constexpr double kPanelH = (960 - kTop - 3 * kXLabels - 2 * kPanelGap - 40) / 3.0;  // three panels on 960 pixels
  std::vector<Panel> panels = {{"loss",
                                {{&s.train_loss, kTrainColor, "train"}, {&s.eval_loss, kEvalColor, "eval", 0, true}},
                                true,
                                ValueAxis::kLogIfWide}};
  if (finite_points(s.reward_margins) + finite_points(s.eval_reward_margins) > 0) {
    panels.push_back(
        {"reward margin",
         {{&s.reward_margins, kTrainColor, "train"}, {&s.eval_reward_margins, kEvalColor, "eval", 0, true}},
         false,  // the loss panel's legend names the colours; rising curves would run under a legend
         ValueAxis::kSigned});
  }
  if (finite_points(s.reward_accuracies) + finite_points(s.eval_reward_accuracies) > 0) {
    panels.push_back(
        {"reward accuracy",
         {{&s.reward_accuracies, kTrainColor, "train"}, {&s.eval_reward_accuracies, kEvalColor, "eval", 0, true}}});
  }
  panels.push_back({"learning rate", {{&s.lr, kLrColor, "learning rate"}}});
  panels.push_back({"tokens/s", {{&s.tokens_per_s, kTokensColor, "tokens/s"}}, false, ValueAxis::kFromZero});
  const auto n = static_cast<double>(panels.size());
  const int height = static_cast<int>(std::lround(kTop + n * (kPanelH + kXLabels) + (n - 1) * kPanelGap + 40));
  Canvas canvas(out, kWidth, height);
  PlotInfo info = draw_panels(canvas.cr(), title, panels, kPanelH, 2);
  info.width = kWidth;
  info.height = height;
  canvas.finish();
  return info;
}

PlotInfo plot_comparison(const std::vector<LabeledSeries>& runs, const std::filesystem::path& out,
                         const std::string& title) {
  const bool any = std::any_of(runs.begin(), runs.end(), [](const LabeledSeries& r) {
    return finite_points(r.series.train_loss) + finite_points(r.series.eval_loss) > 0;
  });
  if (!any) throw Error("no losses to plot", "no trial has logged a step yet");
  constexpr size_t kMaxLegend = 40;
  constexpr double kPanelH = 250, kRow = 18;
  std::vector<Panel> panels = {{"train loss", {}, false, ValueAxis::kLogIfWide},
                               {"eval loss", {}, false, ValueAxis::kLogIfWide}};
  for (size_t i = 0; i < runs.size(); ++i) {
    const int color = kPalette[i % kPalette.size()], dash = static_cast<int>(i / kPalette.size());
    panels[0].curves.push_back({&runs[i].series.train_loss, color, runs[i].label, dash});
    panels[1].curves.push_back({&runs[i].series.eval_loss, color, runs[i].label, dash, true});
  }
  const size_t rows = std::min(runs.size(), kMaxLegend) + (runs.size() > kMaxLegend ? 1 : 0);
  const double legend_top = kTop + 2 * (kPanelH + kXLabels) + kPanelGap + 36;
  const int height = static_cast<int>(std::ceil(legend_top + static_cast<double>(rows) * kRow + 16));
  Canvas canvas(out, kWidth, height);
  cairo_t* cr = canvas.cr();
  PlotInfo info = draw_panels(cr, title, panels, kPanelH, runs.size() > 10 ? 1.5 : 2);
  info.width = kWidth;
  info.height = height;
  double y = legend_top;
  set_font(cr, 12);
  for (size_t i = 0; i < runs.size() && i < kMaxLegend; ++i, y += kRow) {
    const auto& c = panels[0].curves[i];
    set_line_style(cr, c.color, c.dash, 2);
    cairo_move_to(cr, kLeft, y + kRow / 2);
    cairo_line_to(cr, kLeft + 24, y + kRow / 2);
    cairo_stroke(cr);
    set_color(cr, kText);
    draw_text(cr, fit(cr, c.label, kWidth - kLeft - kRight - 32), kLeft + 32, y + kRow / 2, 0, 0.5);
  }
  if (runs.size() > kMaxLegend) {
    set_color(cr, kMuted);
    draw_text(cr, fmt::format("… and {} more", runs.size() - kMaxLegend), kLeft + 32, y + kRow / 2, 0, 0.5);
  }
  canvas.finish();
  return info;
}

}  // namespace ft::metrics

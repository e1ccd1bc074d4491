// The charts of `finetune plot` and the sweep: round axis ticks (the learning-rate axis never below zero), a log axis
// for a loss that falls by more than a decade, the tokens/s axis from zero, the formats by extension (PNG, SVG, PDF;
// anything else refused), and the PNG cairo writes, decoded again with cairo: the reported size, each curve's colour
// where that curve was drawn, and the eval points drawn over the train line.
#include <gtest/gtest.h>

#if FT_TEST_WITH_CAIRO
#include <cairo.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "metrics/plot.h"
#include "support/scratch_dir.h"
#include "support/test_support.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::test {
namespace {

using metrics::nice_ticks;

// 1, 2 or 5 times a power of ten.
bool round_step(double step) {
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (std::abs(mantissa - m) < 1e-6) return true;
  return false;
}

void expect_round_ticks_covering(const metrics::AxisTicks& t, double lo, double hi, int max_ticks) {
  ASSERT_GE(t.values.size(), 2u);
  EXPECT_LE(t.values.size(), static_cast<size_t>(max_ticks));
  EXPECT_TRUE(round_step(t.step)) << t.step;
  EXPECT_LE(t.lo, lo);
  EXPECT_GE(t.hi, hi);
  EXPECT_EQ(t.values.front(), t.lo);
  EXPECT_EQ(t.values.back(), t.hi);
  ASSERT_EQ(t.labels.size(), t.values.size());
  for (size_t i = 0; i < t.values.size(); ++i) {
    const double k = t.values[i] / t.step;
    EXPECT_NEAR(k, std::round(k), 1e-6) << t.values[i] << " is not a multiple of " << t.step;
    if (i > 0) {
      EXPECT_NEAR(t.values[i] - t.values[i - 1], t.step, t.step * 1e-6);
      EXPECT_NE(t.labels[i], t.labels[i - 1]);
    }
  }
}

TEST(PlotTicks, RoundStepsThatCoverTheData) {
  const std::vector<std::pair<double, double>> ranges = {{0, 1},       {0.06, 3.42}, {25, 120},    {1, 200},
                                                         {-3.7, 12.1}, {1e-7, 3e-4}, {5000, 5600}, {0.999, 1},
                                                         {-1e6, -2e5}, {3, 1e9}};
  for (const auto& [lo, hi] : ranges) {
    for (const int max_ticks : {3, 5, 6, 9}) {
      SCOPED_TRACE(::testing::Message() << lo << ".." << hi << " max " << max_ticks);
      expect_round_ticks_covering(nice_ticks(lo, hi, max_ticks), lo, hi, max_ticks);
    }
  }
  auto t = nice_ticks(0.06, 3.42, 6);
  EXPECT_EQ(t.values, (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(t.labels, (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  EXPECT_EQ(t.scale, "");
  t = nice_ticks(25, 120, 9, /*non_negative=*/true, /*min_step=*/1);  // a step axis
  EXPECT_EQ(t.values, (std::vector<double>{20, 40, 60, 80, 100, 120}));
  t = nice_ticks(1, 2, 9, true, 1);  // two steps: no ticks at half steps
  EXPECT_EQ(t.step, 1);
  t = nice_ticks(0.5, 1.02, 6);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"0.4", "0.6", "0.8", "1.0", "1.2"}));
  t = nice_ticks(-1.5, 1.5, 5);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"-2", "-1", "0", "1", "2"}));  // a zero, not "-0"
}

TEST(PlotTicks, LearningRateAxisNeverGoesBelowZeroAndIsLabelledScaled) {
  // Warmup from zero, a decay towards zero, a constant rate, all zero, and a negative value that cannot be real.
  const std::vector<std::pair<double, double>> ranges = {{0, 3e-4},      {1e-5, 3e-3}, {3e-4, 3e-4},
                                                         {2.9e-4, 3e-4}, {0, 0},       {-1e-4, 2e-4}};
  for (const auto& [lo, hi] : ranges) {
    SCOPED_TRACE(::testing::Message() << lo << ".." << hi);
    const auto t = nice_ticks(lo, hi, 6, /*non_negative=*/true);
    EXPECT_GE(t.lo, 0.0);
    for (const double v : t.values) EXPECT_GE(v, 0.0);
    for (const auto& label : t.labels) EXPECT_EQ(label.find('-'), std::string::npos) << label;
    expect_round_ticks_covering(t, std::max(lo, 0.0), hi, 6);
  }
  auto t = nice_ticks(0, 3e-4, 6, true);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(t.scale, "×10⁻⁴");
  t = nice_ticks(3e-4, 3e-4, 6, true);  // constant: widened around the value, still round
  EXPECT_LT(t.lo, 3e-4);
  EXPECT_GT(t.hi, 3e-4);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"2.6", "2.8", "3.0", "3.2", "3.4"}));
  t = nice_ticks(0, 0, 6, true);
  EXPECT_EQ(t.lo, 0);
  EXPECT_EQ(t.hi, 1);
  t = nice_ticks(5000, 250000, 6, true);
  EXPECT_EQ(t.scale, "×10⁵");
}

TEST(PlotTicks, NonFiniteOrReversedBoundsStillGiveAnAxis) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const auto& [lo, hi] : std::vector<std::pair<double, double>>{{nan, 1}, {0, inf}, {-inf, inf}, {nan, nan}}) {
    const auto t = nice_ticks(lo, hi, 6);
    EXPECT_EQ(t.lo, 0);
    EXPECT_EQ(t.hi, 1);
  }
  const auto t = nice_ticks(10, 2, 6);
  EXPECT_LE(t.lo, 2);
  EXPECT_GE(t.hi, 10);
  expect_round_ticks_covering(nice_ticks(1e299, 1e300, 6), 1e299, 1e300, 6);
}

using metrics::log_ticks;

TEST(PlotTicks, LogAxisOnlyForPositiveDataSpanningMoreThanADecade) {
  EXPECT_FALSE(metrics::wants_log_scale(0.5, 4.9));  // a factor 9.8
  EXPECT_TRUE(metrics::wants_log_scale(0.3, 5.5));
  EXPECT_FALSE(metrics::wants_log_scale(0, 5));  // a loss of exactly zero has no logarithm
  EXPECT_FALSE(metrics::wants_log_scale(-1, 5));
  EXPECT_FALSE(metrics::wants_log_scale(1e-3, std::numeric_limits<double>::infinity()));

  auto t = log_ticks(0.3, 4.5, 6);  // 1, 2 and 5 x 10^k when they fit
  EXPECT_TRUE(t.log);
  EXPECT_EQ(t.values, (std::vector<double>{0.2, 0.5, 1, 2, 5}));
  EXPECT_EQ(t.labels, (std::vector<std::string>{"0.2", "0.5", "1", "2", "5"}));
  EXPECT_EQ(t.scale, "");
  t = log_ticks(0.06, 5.5, 6);  // a demo run's loss: the ends, and the powers of ten between them
  EXPECT_EQ(t.values, (std::vector<double>{0.05, 0.1, 1, 10}));
  EXPECT_EQ(t.labels, (std::vector<std::string>{"0.05", "0.1", "1", "10"}));
  t = log_ticks(2e-6, 3e-2, 6);  // reaching below 10^-4: every label a power of ten
  EXPECT_EQ(t.labels, (std::vector<std::string>{"2×10⁻⁶", "10⁻⁵", "10⁻⁴", "10⁻³", "10⁻²", "5×10⁻²"}));
  t = log_ticks(1, 1, 6);  // one value on a tick: room on both sides
  EXPECT_EQ(t.values, (std::vector<double>{0.5, 1, 2}));
  t = log_ticks(0, 5, 6);  // no logarithm of zero: the linear axis
  EXPECT_FALSE(t.log);
  EXPECT_EQ(t.lo, 0);

  const std::vector<std::pair<double, double>> ranges = {{0.06, 5.5}, {1e-3, 12}, {0.011, 0.2}, {1e-250, 1e250},
                                                         {7, 7e6},    {0.9, 1.1}, {3e-5, 1}};
  for (const auto& [lo, hi] : ranges) {
    for (const int max_ticks : {3, 4, 6, 9}) {
      SCOPED_TRACE(::testing::Message() << lo << ".." << hi << " max " << max_ticks);
      t = log_ticks(lo, hi, max_ticks);
      ASSERT_GE(t.values.size(), 2u);
      EXPECT_LE(t.values.size(), static_cast<size_t>(max_ticks));
      EXPECT_LE(t.lo, lo);
      EXPECT_GE(t.hi, hi);
      EXPECT_GT(t.lo, lo / 10.000001);  // the ends hug the data: within the next 1, 2 or 5
      EXPECT_LT(t.hi, hi * 10.000001);
      ASSERT_EQ(t.labels.size(), t.values.size());
      for (size_t i = 1; i < t.values.size(); ++i) {
        EXPECT_GT(t.values[i], t.values[i - 1]);
        EXPECT_NE(t.labels[i], t.labels[i - 1]);
      }
    }
  }
}

TEST(PlotFormat, ByExtensionCaseInsensitiveAndAnyOtherRefusedNamingTheChoices) {
  EXPECT_EQ(metrics::chart_format("a/plot.png"), metrics::ChartFormat::kPng);
  EXPECT_EQ(metrics::chart_format("plot.SVG"), metrics::ChartFormat::kSvg);
  EXPECT_EQ(metrics::chart_format("report.Pdf"), metrics::ChartFormat::kPdf);
  for (const char* name : {"x.jpg", "x.eps", "plot", "x.png.bak"}) {
    try {
      metrics::chart_format(name);
      ADD_FAILURE() << name << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.code(), ExitCode::kUsage);
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("expected .png, .svg or .pdf"), std::string::npos) << e.what();
    }
  }
}

metrics::MetricSeries demo_series(int steps, bool eval) {
  metrics::MetricSeries s;
  for (int step = 1; step <= steps; ++step) {
    s.train_loss.emplace_back(step, 4.0 * std::exp(-step / 50.0) + 0.5);
    s.lr.emplace_back(step, step < 20 ? 3e-4 * step / 20 : 3e-4 * (1 - static_cast<double>(step) / (steps + 1)));
    s.tokens_per_s.emplace_back(step, 5000 + 100 * (step % 7));
    if (eval && step % 50 == 0) s.eval_loss.emplace_back(step, 1.0 + 10.0 / step);
  }
  return s;
}

#if FT_TEST_WITH_CAIRO
// The curve colours of src/metrics/plot_cairo.cpp (Tableau 10).
constexpr uint32_t kBlue = 0x1f77b4, kRed = 0xd62728, kGreen = 0x2ca02c, kOrange = 0xff7f0e;

struct Image {
  int width = 0, height = 0;
  std::vector<uint32_t> rgb;  // 0xRRGGBB, rows top to bottom
};

Image decode_png(const std::filesystem::path& path) {
  Image img;
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
    ADD_FAILURE() << path << ": " << cairo_status_to_string(cairo_surface_status(s));
    cairo_surface_destroy(s);
    return img;
  }
  cairo_surface_flush(s);
  img.width = cairo_image_surface_get_width(s);
  img.height = cairo_image_surface_get_height(s);
  const int stride = cairo_image_surface_get_stride(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  for (int y = 0; y < img.height; ++y) {
    const auto* row = reinterpret_cast<const uint32_t*>(data + static_cast<ptrdiff_t>(y) * stride);
    for (int x = 0; x < img.width; ++x) img.rgb.push_back(row[x] & 0xffffff);
  }
  cairo_surface_destroy(s);
  return img;
}

// Pixels within `tolerance` of `color` on every channel (antialiased edges are blends, line centres the colour).
size_t count_color(const Image& img, uint32_t color, int tolerance = 20) {
  size_t n = 0;
  for (const uint32_t p : img.rgb) {
    bool near = true;
    for (const int shift : {16, 8, 0})
      near = near &&
             std::abs(static_cast<int>((p >> shift) & 255) - static_cast<int>((color >> shift) & 255)) <= tolerance;
    n += near ? 1 : 0;
  }
  return n;
}

uint32_t be32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(bytes[at + i]);
  return v;
}
#endif

class Plot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!metrics::plotting_available()) {
      try {
        metrics::plot_metrics(demo_series(5, false), dir_ / "p.png", "t");
        ADD_FAILURE() << "a build without cairo drew a plot";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("without cairo"), std::string::npos) << e.what();
        EXPECT_NE(e.hint().find("libcairo2-dev"), std::string::npos) << e.hint();
      }
      GTEST_SKIP() << "built without cairo (FT_WITH_CAIRO=OFF)";
    }
  }
  ScratchDir dir_;
};

TEST_F(Plot, NothingToDrawIsAnError) {
  metrics::MetricSeries empty;
  EXPECT_THROW(metrics::plot_metrics(empty, dir_ / "empty.png", "empty"), Error);
  empty.train_loss = {{1, std::nan("")}, {2, std::numeric_limits<double>::infinity()}};
  EXPECT_THROW(metrics::plot_metrics(empty, dir_ / "empty.png", "empty"), Error);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "empty.png"));
}

TEST_F(Plot, AnUnknownExtensionIsRefusedAndNothingIsWritten) {
  EXPECT_THROW(metrics::plot_metrics(demo_series(20, true), dir_ / "plot.jpg", "t"), ConfigError);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "plot.jpg"));
  std::vector<metrics::LabeledSeries> runs = {{"a", demo_series(20, true)}};
  EXPECT_THROW(metrics::plot_comparison(runs, dir_ / "summary.gif", "t"), ConfigError);
}

#if FT_TEST_WITH_CAIRO
TEST_F(Plot, PngHasTheReportedSizeAndEachCurveInItsColour) {
  const auto info = metrics::plot_metrics(demo_series(200, true), dir_ / "plot.png", "test run");
  EXPECT_EQ(info.points, 200u * 3 + 4);
  const std::string bytes = read_file(dir_ / "plot.png");
  ASSERT_GT(bytes.size(), 33u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(bytes, 16), static_cast<uint32_t>(info.width));
  EXPECT_EQ(be32(bytes, 20), static_cast<uint32_t>(info.height));
  const Image img = decode_png(dir_ / "plot.png");
  EXPECT_EQ(img.width, 960);
  EXPECT_EQ(img.height, info.height);
  const size_t white = count_color(img, 0xffffff, 0);
  EXPECT_GT(white, img.rgb.size() / 2);                    // a white page...
  EXPECT_LT(white, img.rgb.size() - img.rgb.size() / 50);  // ...with something on it
  for (const uint32_t color : {kBlue, kGreen, kOrange}) EXPECT_GT(count_color(img, color), 400u) << std::hex << color;
  EXPECT_GT(count_color(img, kRed), 60u);

  // Only a learning rate: its colour and no other curve's (nor their legend entries).
  metrics::MetricSeries lr_only;
  lr_only.lr = demo_series(200, false).lr;
  metrics::plot_metrics(lr_only, dir_ / "lr.png", "lr only");
  const Image lr = decode_png(dir_ / "lr.png");
  EXPECT_GT(count_color(lr, kGreen), 400u);
  for (const uint32_t color : {kBlue, kRed, kOrange}) EXPECT_EQ(count_color(lr, color), 0u) << std::hex << color;
}

TEST_F(Plot, SinglePointsConstantsAndNonFiniteValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  metrics::MetricSeries s;
  s.train_loss = {{3, 2.5}};                                            // one point
  s.lr = {{1, 1e-4}, {2, 1e-4}, {3, 1e-4}};                             // constant
  s.tokens_per_s = {{1, 100}, {2, nan}, {3, inf}, {nan, 5}, {4, 120}};  // two finite points
  const auto info = metrics::plot_metrics(s, dir_ / "edge.png", "edge cases");
  EXPECT_EQ(info.points, 1u + 3 + 2);
  const Image img = decode_png(dir_ / "edge.png");
  EXPECT_GT(count_color(img, kBlue), 10u);  // the single point's marker
  EXPECT_GT(count_color(img, kGreen), 100u);
  EXPECT_GT(count_color(img, kOrange), 100u);
}

TEST_F(Plot, SvgByExtensionAndWriteErrorsNameTheFile) {
  const auto s = demo_series(50, true);
  for (const char* name : {"plot.svg", "PLOT.SVG"}) {
    metrics::plot_metrics(s, dir_ / name, "svg");
    const std::string svg = read_file(dir_ / name);
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << name;
    EXPECT_NE(svg.find("<svg"), std::string::npos);
    EXPECT_NE(svg.find("width=\"960"), std::string::npos) << svg.substr(0, 300);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
  }
  try {
    metrics::plot_metrics(s, dir_ / "missing" / "plot.png", "t");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing/plot.png"), std::string::npos) << e.what();
  }
}

// A loss from 5 down to 0.05 (two decades), evaluated every 25 steps right on the train curve, at about 29,000
// tokens/s with a few percent of wobble.
metrics::MetricSeries falling_series() {
  metrics::MetricSeries s;
  for (int step = 1; step <= 200; ++step) {
    s.train_loss.emplace_back(step, 5.0 * std::exp(-step / 40.0) + 0.05);
    s.lr.emplace_back(step, 3e-4);
    s.tokens_per_s.emplace_back(step, 29000 + 1000 * std::sin(step));
    if (step % 25 == 0) s.eval_loss.emplace_back(step, s.train_loss.back().second);
  }
  return s;
}

TEST_F(Plot, LossOnALogAxisWhenItFallsADecadeAndTokensPerSecondFromZero) {
  const auto info = metrics::plot_metrics(falling_series(), dir_ / "log.png", "log");
  ASSERT_EQ(info.value_axes.size(), 3u);
  EXPECT_TRUE(info.value_axes[0].log);
  EXPECT_LE(info.value_axes[0].lo, 0.05);
  EXPECT_GT(info.value_axes[0].lo, 0);
  EXPECT_EQ(info.value_axes[2].lo, 0) << "tokens/s from zero: a 7 % wobble stays small";
  EXPECT_GE(info.value_axes[2].hi, 30000);
  EXPECT_EQ(info.axis_titles, (std::vector<std::string>{"loss (log scale)", "learning rate (×10⁻⁴)", "tokens/s"}));

  // Within a decade the loss stays linear, and says nothing about its scale.
  const auto linear = metrics::plot_metrics(demo_series(200, true), dir_ / "linear.png", "linear");
  EXPECT_FALSE(linear.value_axes[0].log);
  EXPECT_EQ(linear.axis_titles[0], "loss");
  EXPECT_EQ(linear.value_axes[2].lo, 0);

  std::vector<metrics::LabeledSeries> runs = {{"a", falling_series()}, {"b", demo_series(200, true)}};
  const auto sweep = metrics::plot_comparison(runs, dir_ / "sweep.png", "sweep");
  EXPECT_EQ(sweep.axis_titles, (std::vector<std::string>{"train loss (log scale)", "eval loss (log scale)"}));
}

// A preference run's metrics.jsonl: the reward margin and accuracy of train and eval lines are read, and plotted in
// two panels under the loss, the margin's axis below zero when the margins are.
TEST_F(Plot, PreferenceRunsGetRewardMarginAndAccuracyPanels) {
  std::string lines;
  for (int step = 1; step <= 40; ++step) {
    lines += fmt::format(
        R"({{"event": "train", "step": {}, "loss": {}, "lr": 1e-4, "tokens_per_s": 1000, "rewards/margins": {},)"
        R"( "rewards/accuracies": {}}})"
        "\n",
        step, 0.7 - step * 0.01, -0.2 + step * 0.02, std::min(1.0, step / 40.0));
    if (step % 10 == 0) {
      lines += fmt::format(R"({{"event": "eval", "step": {}, "loss": 0.6, "rewards/margins": {}, )"
                           R"("rewards/accuracies": 0.75}})"
                           "\n",
                           step, step * 0.01);
    }
  }
  write_file(dir_ / "metrics.jsonl", lines);
  const metrics::MetricSeries s = metrics::read_metric_series(dir_ / "metrics.jsonl");
  ASSERT_EQ(s.reward_margins.size(), 40u);
  ASSERT_EQ(s.eval_reward_margins.size(), 4u);
  ASSERT_EQ(s.reward_accuracies.size(), 40u);
  ASSERT_EQ(s.eval_reward_accuracies.size(), 4u);
  EXPECT_DOUBLE_EQ(s.reward_margins.front().second, -0.18);
  EXPECT_DOUBLE_EQ(s.eval_reward_accuracies.back().second, 0.75);
  EXPECT_EQ(s.eval_loss.size(), 4u);

  const auto info = metrics::plot_metrics(s, dir_ / "dpo.png", "dpo");
  EXPECT_EQ(info.axis_titles, (std::vector<std::string>{"loss", "reward margin", "reward accuracy",
                                                        "learning rate (×10⁻⁴)", "tokens/s"}));
  EXPECT_LT(info.value_axes[1].lo, -0.18 + 1e-12) << "the margin's axis reaches its negative values";
  EXPECT_GT(info.height, 960) << "two more panels of the same height";
  // An SFT run keeps its three panels.
  EXPECT_EQ(metrics::plot_metrics(demo_series(50, true), dir_ / "sft.png", "sft").axis_titles.size(), 3u);
}

TEST_F(Plot, EvalPointsAreRingedMarkersDrawnOverTheTrainLine) {
  // One eval point in the left half (the legend is in the top right), on the train curve.
  metrics::MetricSeries s = falling_series();
  s.eval_loss = {{30, s.train_loss[29].second}};
  metrics::plot_metrics(s, dir_ / "eval.png", "eval");
  const Image img = decode_png(dir_ / "eval.png");
  double sum_x = 0, sum_y = 0;
  size_t red = 0;
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width / 2; ++x) {
      const uint32_t p = img.rgb[static_cast<size_t>(y * img.width + x)];
      Image one{1, 1, {p}};
      if (count_color(one, kRed) == 0) continue;
      ++red, sum_x += x, sum_y += y;
    }
  }
  EXPECT_GT(red, 40u) << "a marker of radius 4.5 in the eval colour";
  ASSERT_GT(red, 0u);
  const int cx = static_cast<int>(std::lround(sum_x / red)), cy = static_cast<int>(std::lround(sum_y / red));
  EXPECT_EQ(count_color(Image{1, 1, {img.rgb[static_cast<size_t>(cy * img.width + cx)]}}, kRed), 1u)
      << "the train line is drawn over the eval point at " << cx << "," << cy;
  // The white ring around it: near-white pixels on a circle of radius 5.5 around the centre.
  size_t white = 0;
  for (int a = 0; a < 16; ++a) {
    const double t = a * M_PI / 8;
    const int x = cx + static_cast<int>(std::lround(5.4 * std::cos(t)));
    const int y = cy + static_cast<int>(std::lround(5.4 * std::sin(t)));
    white += count_color(Image{1, 1, {img.rgb[static_cast<size_t>(y * img.width + x)]}}, 0xffffff, 60);
  }
  EXPECT_GE(white, 10u) << "the ring separates the marker from the line";
}

TEST_F(Plot, PdfIsAVectorPageOfTheChartsSize) {
  const auto info = metrics::plot_metrics(demo_series(50, true), dir_ / "plot.pdf", "pdf");
  const std::string pdf = read_file(dir_ / "plot.pdf");
  EXPECT_EQ(pdf.rfind("%PDF-1.", 0), 0u) << pdf.substr(0, 20);
  EXPECT_NE(pdf.find("%%EOF"), std::string::npos);
  // 960 x 960 pixels at 96 dpi: 720 x 720 points.
  EXPECT_NE(pdf.find(fmt::format("/MediaBox [ 0 0 {} {} ]", info.width * 3 / 4, info.height * 3 / 4)),
            std::string::npos);
}

TEST_F(Plot, ComparisonOfManyRunsHasALegendRowEachUpToForty) {
  std::vector<metrics::LabeledSeries> runs;
  for (int i = 0; i < 45; ++i) {
    metrics::LabeledSeries r{"trial " + std::to_string(i) + ": lr=" + std::to_string(i) + "e-4", {}};
    for (int step = 1; step <= 30; ++step) r.series.train_loss.emplace_back(step, 3.0 / step + 0.2 * i);
    if (i % 2 == 0) r.series.eval_loss.emplace_back(30, 0.2 + 0.2 * i);
    runs.push_back(std::move(r));
  }
  runs.push_back({"no metrics yet", {}});
  const auto many = metrics::plot_comparison(runs, dir_ / "many.png", "sweep");
  EXPECT_EQ(many.points, 45u * 30 + 23);
  runs.resize(4);
  const auto four = metrics::plot_comparison(runs, dir_ / "four.png", "sweep");
  EXPECT_EQ(four.width, 960);
  EXPECT_GT(four.height, 600);
  EXPECT_GT(many.height, four.height + 36 * 17);  // 37 more legend rows
  const Image img = decode_png(dir_ / "four.png");
  EXPECT_EQ(img.height, four.height);
  for (const uint32_t color : {kBlue, kOrange, kGreen, kRed})
    EXPECT_GT(count_color(img, color), 100u) << std::hex << color;
  std::vector<metrics::LabeledSeries> nothing = {{"a", {}}, {"b", {}}};
  EXPECT_THROW(metrics::plot_comparison(nothing, dir_ / "nothing.png", "sweep"), Error);
}
#endif

}  // namespace
}  // namespace ft::test

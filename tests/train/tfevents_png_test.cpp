// TensorBoard event files and PNG plots, decoded by an independent Python reader (CRCs, protobuf, zlib).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "reference.h"
#include "scratch_dir.h"
#include "support/test_support.h"
#include "util/checksum.h"
#include "metrics/metrics.h"
#include "metrics/plot.h"
#include "metrics/png.h"

namespace ft::test {
namespace {

TEST(TensorBoard, EventFileParsesWithValidCrcsAndValues) {
  ScratchDir run;
  std::filesystem::path file;
  {
    metrics::MetricsLogger log(run.path(), {true, "off", 5});
    for (int step = 1; step <= 5; ++step)
      log.log("train", step, {{"loss", 3.0 / step}, {"lr", 1e-4 * step}, {"note", "text is not a scalar"}});
    log.log("eval", 5, {{"loss", 0.75}});
    ASSERT_NE(log.tensorboard(), nullptr);
    file = log.tensorboard()->path();
  }
  EXPECT_EQ(file.parent_path(), run.path() / "tb");
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  const auto events = run_reference("tfevents", {{"path", file.string()}});
  ASSERT_FALSE(events.is_null());
  ASSERT_EQ(events.size(), 1u + 5 * 2 + 1);
  EXPECT_EQ(events[0]["file_version"], "brain.Event:2");
  for (int step = 1; step <= 5; ++step) {
    const auto& loss = events[static_cast<size_t>(1 + (step - 1) * 2)];
    const auto& lr = events[static_cast<size_t>(2 + (step - 1) * 2)];
    EXPECT_EQ(loss["tag"], "train/loss");
    EXPECT_EQ(loss["step"], step);
    EXPECT_EQ(loss["value"].get<double>(), static_cast<double>(static_cast<float>(3.0 / step)));
    EXPECT_EQ(lr["tag"], "train/lr");
    EXPECT_EQ(lr["value"].get<double>(), static_cast<double>(static_cast<float>(1e-4 * step)));
    EXPECT_GT(loss["wall_time"].get<double>(), 1.6e9);
  }
  EXPECT_EQ(events.back()["tag"], "eval/loss");
  EXPECT_EQ(events.back()["value"], 0.75);
}

TEST(Plot, PngDecodesWithRightSizeAndDrawnCurves) {
  ScratchDir run;
  {
    std::ofstream m(run / "metrics.jsonl");
    for (int step = 1; step <= 200; ++step) {
      nlohmann::json line = {{"event", "train"}, {"step", step}, {"loss", 4.0 * std::exp(-step / 50.0) + 0.5},
                             {"lr", step < 20 ? 3e-4 * step / 20 : 3e-4}, {"tokens_per_s", 5000 + 100 * (step % 7)}};
      m << line.dump() << "\n";
      if (step % 50 == 0) m << nlohmann::json{{"event", "eval"}, {"step", step}, {"loss", 1.0}}.dump() << "\n";
    }
  }
  const auto series = metrics::read_metric_series(run / "metrics.jsonl");
  EXPECT_EQ(series.train_loss.size(), 200u);
  EXPECT_EQ(series.eval_loss.size(), 4u);
  const auto info = metrics::plot_metrics(series, run / "plot.png", "test run");
  EXPECT_EQ(info.points, 200u * 3 + 4);
  const auto png = run_reference("png", {{"path", (run / "plot.png").string()}});
  ASSERT_FALSE(png.is_null());
  EXPECT_EQ(png["width"], info.width);
  EXPECT_EQ(png["height"], info.height);
  EXPECT_EQ(png["depth"], 8);
  EXPECT_EQ(png["color_type"], 2);
  EXPECT_EQ(png["chunks"], nlohmann::json({"IHDR", "IDAT", "IEND"}));
  EXPECT_GE(png["distinct_colors"].get<int>(), 5);  // white, black, grid, and the curve colours
  // Compression actually compresses a mostly white image.
  EXPECT_LT(std::filesystem::file_size(run / "plot.png"), static_cast<uintmax_t>(info.width * info.height));
}

TEST(Plot, CommandWritesPngAndHasExampleInHelp) {
  ScratchDir run;
  write_file(run / "metrics.jsonl", "{\"event\":\"train\",\"step\":1,\"loss\":2.0,\"lr\":0.001}\n"
                                    "{\"event\":\"train\",\"step\":2,\"loss\":1.5,\"lr\":0.001}\n");
  const auto result = run_finetune("plot " + shell_quote(run.path().string()) + " --out " +
                                   shell_quote((run / "out.png").string()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(std::filesystem::exists(run / "out.png"));
  const auto help = run_finetune("plot --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("Example:"), std::string::npos);
  ScratchDir empty;
  const auto missing = run_finetune("plot " + shell_quote(empty.path().string()));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("metrics.jsonl"), std::string::npos) << missing.output;
}

TEST(Png, ZlibStreamRoundTripsThroughPython) {
  // Random-ish bytes plus long runs: literals, short and long matches.
  std::vector<uint8_t> rgb(64 * 48 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i < rgb.size() / 2 ? (i * 7919) % 251 : 200);
  ScratchDir dir;
  metrics::write_png_rgb(dir / "t.png", 64, 48, rgb);
  const auto png = run_reference("png", {{"path", (dir / "t.png").string()}});
  ASSERT_FALSE(png.is_null());
  EXPECT_EQ(png["width"], 64);
  EXPECT_EQ(png["height"], 48);
  EXPECT_EQ(png["filters"], nlohmann::json({0}));
  Sha256 sha;
  sha.update(rgb.data(), rgb.size());
  EXPECT_EQ(png["pixels_sha256"], sha.hex_digest());  // the decoded pixels are exactly ours
}

}  // namespace
}  // namespace ft::test

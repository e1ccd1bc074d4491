// TensorBoard event files, decoded by an independent Python reader (CRCs, protobuf), and `finetune plot` through the
// binary, its SVG parsed by Python's XML parser.
#include <gtest/gtest.h>

#include "metrics/metrics.h"
#include "metrics/plot.h"
#include "support/scratch_dir.h"
#include "support/test_support.h"
#include "support/torch_reference.h"

namespace ft::test {
namespace {

TEST(TensorBoard, EventFileParsesWithValidCrcsAndValues) {
  ScratchDir run;
  std::filesystem::path file;
  {
    metrics::MetricsLogger log(run.path(), {true, Progress::kOff, 5});
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

TEST(Plot, CommandWritesPngOrSvgAndHasExamplesInHelp) {
  const auto help = run_finetune("plot --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("Example"), std::string::npos);
  EXPECT_NE(help.output.find(".svg"), std::string::npos) << help.output;
  ScratchDir run;
  write_file(run / "metrics.jsonl",
             "{\"event\":\"train\",\"step\":1,\"loss\":2.0,\"lr\":0.001}\n"
             "{\"event\":\"train\",\"step\":2,\"loss\":1.5,\"lr\":0.001}\n"
             "{\"event\":\"eval\",\"step\":2,\"loss\":1.7}\n");
  const std::string dir = shell_quote(run.path().string());
  const auto png = run_finetune("plot " + dir + " --out " + shell_quote((run / "out.png").string()));
  if (!metrics::plotting_available()) {
    EXPECT_NE(png.exit_code, 0);
    EXPECT_NE(png.output.find("without cairo"), std::string::npos) << png.output;
    GTEST_SKIP() << "built without cairo (FT_WITH_CAIRO=OFF)";
  }
  ASSERT_EQ(png.exit_code, 0) << png.output;
  EXPECT_NE(png.output.find("(960x960, 5 points)"), std::string::npos) << png.output;
  EXPECT_EQ(read_file(run / "out.png").substr(1, 3), "PNG");

  // The SVG parses as XML (Python's parser) and has the chart's size.
  const auto svg = run_finetune("plot " + dir + " --out " + shell_quote((run / "out.svg").string()));
  ASSERT_EQ(svg.exit_code, 0) << svg.output;
  const auto xml = run_reference("xml", {{"path", (run / "out.svg").string()}});
  ASSERT_FALSE(xml.is_null());
  EXPECT_EQ(xml["root"], "{http://www.w3.org/2000/svg}svg");
  EXPECT_EQ(xml["width"].get<std::string>().rfind("960", 0), 0u) << xml["width"];
  EXPECT_EQ(xml["height"].get<std::string>().rfind("960", 0), 0u) << xml["height"];
  EXPECT_GT(xml["elements"].get<int>(), 20);

  ScratchDir empty;
  const auto missing = run_finetune("plot " + shell_quote(empty.path().string()));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("metrics.jsonl"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace ft::test

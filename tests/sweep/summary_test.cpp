// summary.md in-process: the heading names the sweep once whatever --out looks like, each value has one column (the
// ranking metric marks the eval column it equals), and the peak memory a CPU trial does not measure reads "n/a".
#include <gtest/gtest.h>

#include <sstream>

#include "sweep/summary.h"

namespace ft::test {
namespace {

TEST(SweepSummary, TitleNamesTheFolderOnceWhateverTheOutPathLooksLike) {
  EXPECT_EQ(sweep::sweep_title("runs/lr"), "Sweep lr");
  EXPECT_EQ(sweep::sweep_title("runs/lr/"), "Sweep lr");  // a trailing slash: not "Sweep " with no name
  EXPECT_EQ(sweep::sweep_title("runs/lr/."), "Sweep lr");
  EXPECT_EQ(sweep::sweep_title("/tmp/x/sweep"), "sweep");  // not "sweep sweep"
  EXPECT_EQ(sweep::sweep_title("/tmp/x/sweep/"), "sweep");
  EXPECT_EQ(sweep::sweep_title("runs/demo-sweep"), "demo-sweep");
  EXPECT_EQ(sweep::sweep_title("runs/LR_Sweep"), "LR_Sweep");
}

sweep::Row row(const std::string& name, sweep::Status status, std::optional<double> eval_loss,
               std::optional<double> peak_gib) {
  sweep::Row r;
  r.trial.name = name;
  r.trial.values = {{"optimizer.lr", "1.0e-3", name, ""}};
  r.status = status;
  r.steps = eval_loss ? 20 : 0;
  r.eval_loss = eval_loss;
  r.peak_memory_gib = peak_gib;
  return r;
}

sweep::SweepRecord record(const std::string& metric, sweep::Mode mode) {
  sweep::SweepRecord rec;
  rec.base_config = "base.yaml";
  rec.sweep_file = "sweep.yaml";
  rec.metric = metric;
  rec.mode = mode;
  rec.keys = {"optimizer.lr"};
  return rec;
}

// The Markdown table's lines: the header first.
std::vector<std::string> table_lines(const std::string& md) {
  std::vector<std::string> lines;
  std::istringstream in(md);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| ", 0) == 0) lines.push_back(line);
  }
  return lines;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

TEST(SweepSummary, RankedByEvalLossTheEvalLossColumnIsTheMetricAndAppearsOnce) {
  std::vector<sweep::Row> rows = {row("cpu", sweep::Status::kFinished, 1.2345678, 0.0),
                                  row("gpu", sweep::Status::kFinished, 2.5, 3.5),
                                  row("waiting", sweep::Status::kPending, std::nullopt, std::nullopt)};
  rows[0].metric = rows[0].eval_loss;
  rows[0].best = true;
  rows[1].metric = rows[1].eval_loss;
  const std::string md = sweep::render_markdown("/tmp/runs/sweep", record("eval.loss", sweep::Mode::kMin), rows, false);
  EXPECT_EQ(md.rfind("# sweep\n", 0), 0u) << md;
  const auto lines = table_lines(md);
  ASSERT_EQ(lines.size(), 4u) << md;
  EXPECT_EQ(lines[0],
            "| | trial | optimizer.lr | status | steps | train loss | eval loss (ranked) | perplexity | exact match | "
            "tokens/s | peak GiB | wall |");
  EXPECT_EQ(count_of(lines[1], "1.23457"), 1u) << lines[1];            // the metric's 6 digits, once
  EXPECT_NE(lines[1].find("| n/a |"), std::string::npos) << lines[1];  // a CPU trial: 0 GiB logged
  EXPECT_NE(lines[2].find("| 3.50 |"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[3].find("n/a"), std::string::npos) << lines[3];  // nothing logged yet: blank
  for (const auto& line : lines) EXPECT_EQ(count_of(line, "|"), count_of(lines[0], "|")) << line;
  EXPECT_NE(md.find("**Best: cpu**"), std::string::npos) << md;
}

TEST(SweepSummary, AMetricWithoutItsOwnColumnGetsOneAndExactMatchKeepsItsPercentage) {
  std::vector<sweep::Row> rows = {row("a", sweep::Status::kFinished, 1.5, 0.0)};
  rows[0].train_loss = 1.25;
  rows[0].metric = 1.0;
  auto lines = table_lines(sweep::render_markdown("runs/lr", record("train.loss", sweep::Mode::kMin), rows, false));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("| eval loss | perplexity |"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].substr(lines[0].size() - 14), "| train.loss |") << lines[0];

  rows[0].exact_match = 0.5;
  rows[0].metric = 0.5;
  lines = table_lines(sweep::render_markdown("runs/lr", record("eval.exact_match", sweep::Mode::kMax), rows, false));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("| exact match (ranked) |"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("eval.exact_match"), std::string::npos) << lines[0];
  EXPECT_EQ(count_of(lines[1], "50.0%"), 1u) << lines[1];
}

}  // namespace
}  // namespace ft::test

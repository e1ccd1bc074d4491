// `finetune sweep` end to end on the CPU with a tiny config: a 2x2 grid and its summary, a sweep killed mid-way and
// resumed bit-exactly, a failing trial among finishing ones, the fan-out commands (--list / --index / --summarize)
// against the single command, SIGTERM forwarding, and median stopping.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "metrics/plot.h"
#include "sweep/sweep_support.h"
#include "train/train_support.h"
#include "util/error.h"

namespace ft::test {
namespace {
namespace fs = std::filesystem;

// A live (not zombie) process with this pid exists.
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text) || text.rfind(')') == std::string::npos) return false;
  return text.compare(text.rfind(')'), 3, ") Z") != 0;
}

std::map<int64_t, double> eval_losses(const fs::path& run_dir) {
  std::map<int64_t, double> out;
  auto metrics = read_metrics(run_dir);
  for (const auto& [step, line] : metrics["eval"]) out[step] = number_at(line, "loss");
  return out;
}

class Sweep : public ::testing::Test {
 protected:
  void SetUp() override { write_file(base_, tiny_sweep_base(dir_.path())); }

  fs::path write_sweep(const std::string& name, const std::string& text) {
    const auto path = dir_ / (name + ".yaml");
    write_file(path, text);
    return path;
  }

  // Checks every summary.csv row against the trial's own metrics.jsonl.
  void expect_rows_match_metrics(const fs::path& sweep_dir, size_t trials) {
    const auto rows = read_csv(sweep_dir / "summary.csv");
    ASSERT_EQ(rows.size(), trials);
    double previous = -INFINITY;
    for (const auto& row : rows) {
      SCOPED_TRACE(row.at("name"));
      auto metrics = read_metrics(sweep_dir / row.at("name"));
      ASSERT_FALSE(metrics["train"].empty());
      ASSERT_FALSE(metrics["eval"].empty());
      EXPECT_EQ(row.at("status"), "finished");
      EXPECT_EQ(std::stoll(row.at("steps")), metrics["train"].rbegin()->first);
      EXPECT_EQ(std::stod(row.at("final_train_loss")), number_at(metrics["train"].rbegin()->second, "loss"));
      double best_eval = INFINITY, best_ppl = INFINITY;
      for (const auto& [step, line] : metrics["eval"]) {
        best_eval = std::min(best_eval, number_at(line, "loss"));
        best_ppl = std::min(best_ppl, number_at(line, "perplexity"));
      }
      EXPECT_EQ(std::stod(row.at("best_eval_loss")), best_eval);
      EXPECT_EQ(std::stod(row.at("best_perplexity")), best_ppl);
      EXPECT_EQ(std::stod(row.at("metric")), best_eval) << "ranked by eval.loss";
      EXPECT_GT(std::stod(row.at("tokens_per_s")), 0.0);
      EXPECT_GE(std::stod(row.at("metric")), previous) << "sorted best first";
      previous = std::stod(row.at("metric"));
    }
    EXPECT_EQ(rows.front().at("best"), "1");
    EXPECT_EQ(rows.back().at("best"), "0");
  }

  TempDir dir_{"ft-sweep"};
  fs::path base_ = dir_ / "base.yaml";
};

TEST_F(Sweep, GridTwoByTwoWritesFourRunsAndASummaryMatchingTheirMetrics) {
  const auto sweep = write_sweep("grid", "output_dir: " + (dir_ / "grid").string() +
                                             "\n"
                                             "grid:\n"
                                             "  optimizer.lr: [2.0e-3, 6.0e-3]\n"
                                             "  model.num_layers: [1, 2]\n");
  const auto result = run(sweep_cmd(base_, sweep));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto out = dir_ / "grid";
  for (const char* name :
       {"lr2.0e-3-num_layers1", "lr2.0e-3-num_layers2", "lr6.0e-3-num_layers1", "lr6.0e-3-num_layers2"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(fs::exists(out / name / "config.yaml"));
    EXPECT_TRUE(fs::exists(out / name / "model" / "model.safetensors"));
    EXPECT_EQ(text_at(trial_state(out / name), "status"), "finished");
    EXPECT_EQ(number_at(trial_state(out / name), "attempts"), 1);
  }
  // The trial's resolved config reruns it by hand: it holds the swept values.
  const std::string config = read_file(out / "lr6.0e-3-num_layers2" / "config.yaml");
  EXPECT_NE(config.find("lr: 0.006"), std::string::npos) << config;
  EXPECT_NE(config.find("num_layers: 2"), std::string::npos) << config;
  expect_rows_match_metrics(out, 4);
  const std::string md = read_file(out / "summary.md");
  EXPECT_NE(md.find("**best**"), std::string::npos) << md;
  EXPECT_EQ(md.rfind("# Sweep grid\n", 0), 0u) << md;
  // Ranked by eval.loss (the default): its column is marked, not repeated; the CPU measures no peak memory.
  EXPECT_EQ(count_of(md, "| eval loss (ranked) |"), 1u) << md;
  EXPECT_EQ(md.find("eval.loss |"), std::string::npos) << md;
  EXPECT_EQ(count_of(md, "| n/a |"), 4u) << md;
  if (metrics::plotting_available()) {  // a build without cairo writes no chart
    EXPECT_NE(md.find("![train and eval loss of every trial](summary.png)"), std::string::npos) << md;
    const auto size = png_size(out / "summary.png");
    ASSERT_TRUE(size.has_value());
    EXPECT_EQ(size->first, 960u);
    EXPECT_GT(size->second, 600u);
  }
  EXPECT_NE(result.output.find("4 trials: 4 finished"), std::string::npos) << result.output;

  // --status reads the directory alone; a second run has nothing left to do.
  const auto status = run_finetune("sweep --status " + shell_quote(out.string()));
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_EQ(count_of(status.output, "| finished |"), 4u) << status.output;
  const auto again = run(sweep_cmd(base_, sweep));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("starting trial"), std::string::npos) << again.output;
  EXPECT_EQ(number_at(trial_state(out / "lr2.0e-3-num_layers1"), "attempts"), 1);
}

TEST_F(Sweep, KilledMidwayFinishedTrialsAreKeptAndTheInterruptedOneResumesBitExactly) {
  const auto sweep = write_sweep("kill", "output_dir: " + (dir_ / "kill").string() +
                                             "\n"
                                             "set: {train.max_steps: 40}\n"
                                             "grid:\n"
                                             "  optimizer.lr: [2.0e-3, 3.0e-3]\n");
  const auto out = dir_ / "kill";
  const auto first = out / "lr2.0e-3", second = out / "lr3.0e-3";
  {
    BackgroundProcess process(sweep_cmd(base_, sweep), dir_ / "kill.log");
    ASSERT_TRUE(wait_until([&] { return losses(second).count(14) > 0; }, std::chrono::seconds(300)))
        << read_file(dir_ / "kill.log");
    const auto child = static_cast<pid_t>(number_at(trial_state(second), "pid"));
    ASSERT_GT(child, 0);
    ::kill(process.pid(), SIGKILL);
    ::kill(child, SIGKILL);
    EXPECT_EQ(process.wait(std::chrono::seconds(30)), 128 + SIGKILL);
    ASSERT_TRUE(wait_until([&] { return !alive(child); }, std::chrono::seconds(30)));
  }
  EXPECT_EQ(text_at(trial_state(first), "status"), "finished");
  EXPECT_EQ(text_at(trial_state(second), "status"), "running") << "killed before it could write anything else";
  const auto status = run_finetune("sweep --status " + shell_quote(out.string()));
  EXPECT_EQ(count_of(status.output, "| interrupted |"), 1u) << status.output;
  const auto first_losses = losses(first);

  const auto rerun = run(sweep_cmd(base_, sweep));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("resuming trial lr3.0e-3"), std::string::npos) << rerun.output;
  EXPECT_EQ(rerun.output.find("trial lr2.0e-3 (#0)"), std::string::npos) << "finished trials are not rerun";
  EXPECT_EQ(number_at(trial_state(first), "attempts"), 1);
  EXPECT_EQ(count_of(read_file(first / "output.log"), "=== finetune sweep"), 1u);
  EXPECT_EQ(number_at(trial_state(second), "attempts"), 2);
  EXPECT_NE(read_file(second / "output.log").find("resumed from"), std::string::npos);
  expect_same_losses(first_losses, losses(first), 0.0);

  // The same trial run by hand from its resolved config, without interruption: the same losses, bit for bit.
  const auto reference = dir_ / "reference";
  const auto by_hand = run(train_cmd(second / "config.yaml", "run.output_dir=" + shell_quote(reference.string())));
  ASSERT_EQ(by_hand.exit_code, 0) << by_hand.output;
  ASSERT_EQ(losses(reference).size(), 40u);
  expect_same_losses(losses(reference), losses(second), 0.0);
  EXPECT_EQ(eval_losses(reference), eval_losses(second));
  expect_rows_match_metrics(out, 2);
}

TEST_F(Sweep, SigtermStopsTheRunningTrialWithACheckpointAndTheRerunResumesIt) {
  const auto sweep = write_sweep("term", "output_dir: " + (dir_ / "term").string() +
                                             "\n"
                                             "set: {train.max_steps: 40}\n"
                                             "grid:\n"
                                             "  optimizer.lr: [2.0e-3, 3.0e-3]\n");
  const auto out = dir_ / "term";
  EXPECT_EQ(run_and_signal(sweep_cmd(base_, sweep), out / "lr2.0e-3", 10, SIGTERM), 130);
  EXPECT_EQ(text_at(trial_state(out / "lr2.0e-3"), "status"), "interrupted");
  EXPECT_EQ(number_at(trial_state(out / "lr2.0e-3"), "exit_code"), 130) << "the trial checkpointed and stopped";
  EXPECT_FALSE(fs::exists(out / "lr3.0e-3" / "trial.json")) << "no new trial starts after the signal";
  EXPECT_TRUE(fs::exists(out / "summary.md"));
  const auto rerun = run(sweep_cmd(base_, sweep));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(read_file(out / "lr2.0e-3" / "output.log").find("resumed from"), std::string::npos);
  EXPECT_EQ(losses(out / "lr2.0e-3").size(), 40u);
  expect_rows_match_metrics(out, 2);
}

TEST_F(Sweep, ASecondSignalKillsTheRunningTrialAtOnce) {
  // A large synthetic set makes the trial's setup (data, tokenizer) last seconds: the first signal, forwarded, asks
  // it to stop after its first step, and the second one arrives well before that.
  const auto sweep = write_sweep("twice", "output_dir: " + (dir_ / "twice").string() +
                                              "\n"
                                              "set: {data.synth.train_samples: 200000}\n"
                                              "grid:\n"
                                              "  optimizer.lr: [2.0e-3]\n");
  const auto trial = dir_ / "twice" / "lr2.0e-3";
  const auto log = dir_ / "twice.log";
  BackgroundProcess process(sweep_cmd(base_, sweep), log);
  auto logged = [&](const fs::path& file, const std::string& text) {
    return wait_until(
        [&] {
          std::error_code ec;
          return fs::exists(file, ec) && read_file(file).find(text) != std::string::npos;
        },
        std::chrono::seconds(120));
  };
  ASSERT_TRUE(logged(trial / "output.log", "run directory")) << read_file(log);
  ::kill(process.pid(), SIGINT);
  ASSERT_TRUE(logged(log, "a second signal kills them")) << read_file(log);
  ::kill(process.pid(), SIGINT);
  EXPECT_EQ(process.wait(std::chrono::seconds(60)), 130);
  EXPECT_NE(read_file(log).find("second signal: killed 1 running trial"), std::string::npos) << read_file(log);
  const auto state = trial_state(trial);
  EXPECT_EQ(text_at(state, "status"), "interrupted");
  EXPECT_EQ(number_at(state, "exit_code"), 128 + SIGKILL) << read_file(trial / "output.log");
}

TEST_F(Sweep, AFailingTrialIsRecordedWhileTheOthersFinish) {
  // An initialisation that only fails at run time: the first step's loss is not finite.
  const auto sweep = write_sweep("fail", "output_dir: " + (dir_ / "fail").string() +
                                             "\n"
                                             "list:\n"
                                             "  - {optimizer.lr: 2.0e-3}\n"
                                             "  - {model.init_std: 1.0e30}\n"
                                             "  - {optimizer.lr: 4.0e-3}\n");
  const auto out = dir_ / "fail";
  const auto result = run(sweep_cmd(base_, sweep));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("FAILED trial init_std1.0e30 (#1)"), std::string::npos) << result.output;
  const auto failed = trial_state(out / "init_std1.0e30");
  EXPECT_EQ(text_at(failed, "status"), "failed");
  EXPECT_EQ(number_at(failed, "exit_code"), 1);
  EXPECT_NE(text_at(failed, "error").find("non-finite loss at step 1"), std::string::npos) << failed.dump();
  EXPECT_EQ(text_at(trial_state(out / "lr2.0e-3"), "status"), "finished");
  EXPECT_EQ(text_at(trial_state(out / "lr4.0e-3"), "status"), "finished") << "the trial after the failure ran";
  const auto rows = read_csv(out / "summary.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows.back().at("name"), "init_std1.0e30");
  EXPECT_EQ(rows.back().at("status"), "failed");
  EXPECT_EQ(rows.back().at("exit_code"), "1");
  EXPECT_NE(rows.back().at("error").find("non-finite loss"), std::string::npos);
  EXPECT_NE(read_file(out / "summary.md").find("## Failed trials"), std::string::npos);

  // Rerun: the failure stays recorded and is not retried...
  const auto again = run(sweep_cmd(base_, sweep));
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_EQ(number_at(trial_state(out / "init_std1.0e30"), "attempts"), 1);
  // ...unless asked.
  const auto retry = run(sweep_cmd(base_, sweep, "--retry-failed"));
  EXPECT_EQ(retry.exit_code, 1) << retry.output;
  EXPECT_EQ(number_at(trial_state(out / "init_std1.0e30"), "attempts"), 2);
  EXPECT_EQ(number_at(trial_state(out / "lr4.0e-3"), "attempts"), 1);
}

TEST_F(Sweep, ListIndexAndSummarizeReproduceTheSingleCommandSweep) {
  const auto sweep = write_sweep("fan", "grid:\n  optimizer.lr: [2.0e-3, 6.0e-3]\n");
  const auto single = dir_ / "single", fanned = dir_ / "fanned";
  const auto one = run(sweep_cmd(base_, sweep, "--out " + shell_quote(single.string())));
  ASSERT_EQ(one.exit_code, 0) << one.output;

  const auto list = run_finetune("sweep --config " + shell_quote(base_.string()) + " --sweep " +
                                 shell_quote(sweep.string()) + " --list");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_EQ(list.output, "0\tlr2.0e-3\toptimizer.lr=2.0e-3\n1\tlr6.0e-3\toptimizer.lr=6.0e-3\n");
  for (int i = 1; i >= 0; --i) {  // array tasks finish in any order
    const auto task =
        run(sweep_cmd(base_, sweep, "--out " + shell_quote(fanned.string()) + " --index " + std::to_string(i)));
    ASSERT_EQ(task.exit_code, 0) << task.output;
    EXPECT_FALSE(fs::exists(fanned / "summary.csv")) << "the summary is --summarize's job";
  }
  const auto done = run(sweep_cmd(base_, sweep, "--out " + shell_quote(fanned.string()) + " --index 0"));
  EXPECT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("already finished"), std::string::npos) << done.output;
  const auto beyond = run(sweep_cmd(base_, sweep, "--out " + shell_quote(fanned.string()) + " --index 2"));
  EXPECT_EQ(beyond.exit_code, 2) << beyond.output;
  EXPECT_NE(beyond.output.find("--index 2: the sweep has 2 trials"), std::string::npos) << beyond.output;

  const auto summary = run(sweep_cmd(base_, sweep, "--out " + shell_quote(fanned.string()) + " --summarize"));
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  const auto a = read_csv(single / "summary.csv"), b = read_csv(fanned / "summary.csv");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    for (const auto& [column, cell] : a[i]) {
      if (column == "wall_s" || column == "tokens_per_s") continue;  // timings
      EXPECT_EQ(cell, b[i].at(column)) << column;
    }
    expect_same_losses(losses(single / a[i].at("name")), losses(fanned / b[i].at("name")), 0.0);
  }
  EXPECT_EQ(png_size(fanned / "summary.png").has_value(), metrics::plotting_available());
  expect_rows_match_metrics(fanned, 2);
}

TEST_F(Sweep, MaxParallelRunsTrialsAtOnceOnTheCpu) {
  const auto sweep = write_sweep("parallel", "output_dir: " + (dir_ / "parallel").string() +
                                                 "\n"
                                                 "max_parallel: 2\n"
                                                 "set: {train.max_steps: 30}\n"
                                                 "grid:\n"
                                                 "  optimizer.lr: [2.0e-3, 3.0e-3]\n");
  const auto out = dir_ / "parallel";
  const auto result = run(sweep_cmd(base_, sweep));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("2 at a time on the CPU"), std::string::npos) << result.output;
  const auto a = trial_state(out / "lr2.0e-3"), b = trial_state(out / "lr3.0e-3");
  // Both started before either ended.
  const double a_end = number_at(a, "started") + number_at(a, "wall_s");
  const double b_end = number_at(b, "started") + number_at(b, "wall_s");
  EXPECT_LT(number_at(b, "started"), a_end);
  EXPECT_LT(number_at(a, "started"), b_end);
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {  // the trials share the cores
    EXPECT_NE(read_file(out / "lr2.0e-3" / "output.log").find(" OMP_NUM_THREADS="), std::string::npos);
  }
  expect_rows_match_metrics(out, 2);
}

TEST_F(Sweep, MedianStoppingStopsATrialWorseThanTheFinishedOnes) {
  const auto sweep = write_sweep("median", "output_dir: " + (dir_ / "median").string() +
                                               "\n"
                                               "metric: train.loss\n"
                                               "median_stop: {min_trials: 2, warmup_steps: 4}\n"
                                               "list:\n"
                                               "  - {optimizer.lr: 3.0e-3}\n"
                                               "  - {optimizer.lr: 4.0e-3}\n"
                                               "  - {optimizer.lr: 1.0e-9, train.max_steps: 5000}\n");
  const auto out = dir_ / "median";
  const auto result = run(sweep_cmd(base_, sweep));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto pruned = trial_state(out / "lr1.0e-9-max_steps5000");
  EXPECT_EQ(text_at(pruned, "status"), "pruned") << result.output;
  EXPECT_NE(text_at(pruned, "error").find("worse than the median"), std::string::npos) << pruned.dump();
  EXPECT_LT(losses(out / "lr1.0e-9-max_steps5000").rbegin()->first, 5000);
  EXPECT_TRUE(fs::exists(out / "lr1.0e-9-max_steps5000" / "checkpoints")) << "stopped with a checkpoint";
  EXPECT_NE(read_file(out / "summary.md").find("## Stopped early"), std::string::npos);
  const auto rows = read_csv(out / "summary.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows.back().at("status"), "pruned");
}

}  // namespace
}  // namespace ft::test

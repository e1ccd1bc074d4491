// The run directory keeps what a person relies on: a refused resume names the settings that differ and leaves
// config.yaml as it was, a resume with changed settings keeps the earlier config in config_history/, and running a
// finished run again says so without rewriting its checkpoints or final model. On a terminal the progress bar stays at
// the bottom while log lines scroll above it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "train/train_support.h"
#include "util/error.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;

class TrainRunDir : public TinyRunTest {};

TEST_F(TrainRunDir, RefusedResumeNamesTheDifferingKeysAndLeavesConfigYamlAsItWas) {
  const auto config = write_config("r");
  const std::string first = "train.max_steps=10";
  ASSERT_EQ(run(train_cmd(config, first)).exit_code, 0);
  const auto run_dir = dir_ / "r";
  const std::string before = read_file(run_dir / "config.yaml");

  const auto refused = run(train_cmd(config, "train.max_steps=20 data.seq_len=48 optimizer.lr=1.0e-3"));
  EXPECT_EQ(refused.exit_code, static_cast<int>(ExitCode::kUsage)) << refused.output;
  EXPECT_NE(refused.output.find("data.seq_len: 32 -> 48"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("optimizer.lr: "), std::string::npos) << "only the settings that block a resume";
  EXPECT_EQ(read_file(run_dir / "config.yaml"), before);
  EXPECT_FALSE(fs::exists(run_dir / "config_history"));
}

TEST_F(TrainRunDir, FinishedRunRerunSaysItIsCompleteAndRewritesNothing) {
  const auto config = write_config("f");
  ASSERT_EQ(run(train_cmd(config, "train.max_steps=10")).exit_code, 0);
  const auto run_dir = dir_ / "f";
  const auto model_file = run_dir / "model" / "model.safetensors";
  ASSERT_TRUE(fs::exists(model_file));
  const auto model_time = fs::last_write_time(model_file);
  const auto checkpoint_time = fs::last_write_time(run_dir / "checkpoints" / "step-000010");

  const auto again = run(train_cmd(config, "train.max_steps=10"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("the run is complete: step 10 of 10"), std::string::npos) << again.output;
  EXPECT_EQ(fs::last_write_time(model_file), model_time);
  EXPECT_EQ(fs::last_write_time(run_dir / "checkpoints" / "step-000010"), checkpoint_time);

  // Raising max_steps continues the run, and the earlier config is kept.
  const std::string first_config = read_file(run_dir / "config.yaml");
  const auto longer = run(train_cmd(config, "train.max_steps=12"));
  EXPECT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_NE(longer.output.find("resum"), std::string::npos) << longer.output;
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step-000012"));
  EXPECT_EQ(read_file(run_dir / "config_history" / "1.yaml"), first_config);
  EXPECT_NE(read_file(run_dir / "config.yaml").find("max_steps: 12"), std::string::npos);
}

// The run directory's config.yaml is written after the synthetic data and the tokenizer were made, so it names
// them: training again from it resumes the run on the same files instead of generating or training anew.
TEST_F(TrainRunDir, ConfigYamlNamesTheGeneratedDataAndTrainedTokenizerAndARerunFromItResumes) {
  const auto config = write_config("g");
  const auto first = run(train_cmd(config, "train.max_steps=4 checkpoint.every_steps=2 scheduler.warmup_steps=1"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("generated 4000 synthetic 'reverse' samples"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("trained a 300-piece bpe tokenizer"), std::string::npos) << first.output;
  const auto run_dir = fs::absolute(dir_ / "g");
  const std::string yaml = read_file(run_dir / "config.yaml");
  EXPECT_NE(yaml.find((run_dir / "data" / "reverse-train.jsonl").string()), std::string::npos) << yaml;
  EXPECT_NE(yaml.find((run_dir / "tokenizer" / "tokenizer.model").string()), std::string::npos) << yaml;

  // From another working directory, with only config.yaml: the same files, the run continues from step 4.
  const auto again = run("cd / && " + train_cmd(run_dir / "config.yaml", "train.max_steps=6"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("resum"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("generated"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("trained a"), std::string::npos) << again.output;
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step-000006"));
  EXPECT_EQ(losses(run_dir).size(), 6u);
}

// tokenizer.train_vocab_size with a tokenizer.path that does not exist yet trains the tokenizer into that path at
// the first start and loads it from there afterwards.
TEST_F(TrainRunDir, TrainedTokenizerGoesToTokenizerPathWhenItDoesNotExistYet) {
  const auto config = write_config("t");
  const auto file = fs::absolute(dir_ / "tok" / "sp.model");
  const std::string overrides = "train.max_steps=2 scheduler.warmup_steps=1 tokenizer.path=" + file.string();
  const auto first = run(train_cmd(config, overrides));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("trained a 300-piece bpe tokenizer into " + file.string()), std::string::npos)
      << first.output;
  EXPECT_TRUE(fs::exists(file));
  EXPECT_FALSE(fs::exists(dir_ / "t" / "tokenizer"));
  const auto second = run(train_cmd(config, overrides + " train.max_steps=3"));
  EXPECT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(second.output.find("trained a"), std::string::npos) << second.output;
}

TEST_F(TrainRunDir, MicroBatchLargerThanTheDataWarns) {
  const auto r = run(train_cmd(write_config("m"), "train.max_steps=1 scheduler.warmup_steps=0 train.micro_batch_size=5000"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data.train gives each rank 4000 row(s) per epoch, fewer than train.micro_batch_size=5000"),
            std::string::npos)
      << r.output;
}

// The run under script(1), whose pseudo-terminal makes stderr a TTY (logging.progress: auto draws the bar there).
TEST_F(TrainRunDir, ProgressBarOnATerminalRedrawsPerStepUnderTheLogLinesAndTrainLogGetsTheLossLines) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) is not installed";
  const auto config = write_config("p");
  const std::string cmd = train_cmd(config, "train.max_steps=20 logging.every_steps=5 logging.progress=auto");
  const auto r = run("script -qefc " + shell_quote(cmd) + " /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const int step : {5, 10, 15, 20}) {
    EXPECT_NE(r.output.find(std::to_string(step * 5) + "% step " + std::to_string(step) + "/20 | loss "),
              std::string::npos)
        << "no bar drawn at step " << step << ":\n"
        << r.output;
  }
  EXPECT_NE(r.output.find(" elapsed | ETA "), std::string::npos) << r.output;
  // A log line (the checkpoint at step 10) clears the bar's line, and the bar is drawn again below it.
  const auto saved = r.output.find("checkpoint saved: ");
  ASSERT_NE(saved, std::string::npos) << r.output;
  const auto line_end = r.output.find('\n', saved);
  ASSERT_NE(line_end, std::string::npos);
  EXPECT_EQ(r.output.compare(line_end + 1, 1, "["), 0) << r.output.substr(saved, 300);
  EXPECT_NE(r.output.rfind("\r\033[K", saved), std::string::npos);
  // train.log has the interval's loss lines although the console showed a bar.
  const std::string log = read_file(dir_ / "p" / "train.log");
  for (const int step : {5, 10, 15, 20}) {
    EXPECT_NE(log.find("step " + std::to_string(step) + "/20 | loss "), std::string::npos) << log;
  }
  EXPECT_EQ(log.find("[#"), std::string::npos) << "no bar in the log file";
}

}  // namespace
}  // namespace ft::test

// The run directory keeps what a person relies on: a refused resume names the settings that differ and leaves
// config.yaml as it was, a resume with changed settings keeps the earlier config in config_history/, and running a
// finished run again says so without rewriting its checkpoints or final model.
#include <gtest/gtest.h>

#include <filesystem>

#include "loop_support.h"
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

}  // namespace
}  // namespace ft::test

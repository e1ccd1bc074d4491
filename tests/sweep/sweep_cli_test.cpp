// `finetune sweep` on the command line without training: bad sweep files and invalid trial configs exit 2 naming the
// file, line and key (or the trial) before anything starts; --list, --status and the help.
#include <gtest/gtest.h>

#include "sweep/sweep_support.h"

namespace ft::test {
namespace {
namespace fs = std::filesystem;

class SweepCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(base_, tiny_sweep_base(dir_.path())); }

  CommandResult sweep(const std::string& text, const std::string& args = "") {
    write_file(file_, text);
    return run(sweep_cmd(base_, file_, "--out " + shell_quote((dir_ / "out").string()) + " " + args));
  }

  TempDir dir_{"ft-sweep-cli"};
  fs::path base_ = dir_ / "base.yaml";
  fs::path file_ = dir_ / "bad.yaml";
};

TEST_F(SweepCli, BadSweepFilesExitTwoNamingFileLineAndKey) {
  const std::string f = file_.string();
  struct Case {
    const char* what;
    std::string text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"unknown key", "grid:\n  optimizer.lr: [1.0e-3]\nrandm: {samples: 2}\n",
       f + ":3:1: randm: unknown key; did you mean random?"},
      {"unknown config key", "grid:\n  optimizer.weight_decy: [0.1]\n",
       f + ":2:3: grid.optimizer.weight_decy: unknown config key 'optimizer.weight_decy'; did you mean "
           "optimizer.weight_decay?"},
      {"empty grid", "grid:\n  optimizer.lr: []\n", f + ":2:17: grid.optimizer.lr: empty list"},
      {"wrong type", "grid:\n  lora.rank: [8, 16.5]\n",
       f + ":2:18: grid.lora.rank[1]: wrong type (expected an integer, got '16.5')"},
      {"duplicate names", "name: \"r${lora.rank}\"\ngrid:\n  lora.rank: [8]\n  optimizer.lr: [1.0e-3, 2.0e-3]\n",
       f + ":1:7: name: trials #0 (lora.rank=8 optimizer.lr=1.0e-3) and #1 (lora.rank=8 optimizer.lr=2.0e-3) both get "
           "the name 'r8'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto result = sweep(c.text);
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(dir_ / "out")) << "nothing starts";
  }
}

TEST_F(SweepCli, InvalidTrialConfigsAreAllListedWithTheirTrialBeforeAnyStarts) {
  const auto result = sweep("grid:\n  optimizer.lr: [1.0e-3, -1]\n  train.micro_batch_size: [4, 0]\n");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("3 of 4 trial configs have errors (nothing was started)"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("trial lr1.0e-3-micro_batch_size0 (#1):"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("trial lr-1-micro_batch_size0 (#3):"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(file_.string() + ":2:26 (optimizer.lr=-1): optimizer.lr:"), std::string::npos)
      << result.output;
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  // A command-line override may not change a swept key, nor the directory a trial runs in.
  const auto swept = sweep("grid:\n  optimizer.lr: [1.0e-3]\n", "optimizer.lr=0.1");
  EXPECT_EQ(swept.exit_code, 2);
  EXPECT_NE(swept.output.find("optimizer.lr is swept by"), std::string::npos) << swept.output;
  const auto owned = sweep("grid:\n  optimizer.lr: [1.0e-3]\n", "run.output_dir=/tmp/x");
  EXPECT_EQ(owned.exit_code, 2);
  EXPECT_NE(owned.output.find("run.output_dir is set by the sweep"), std::string::npos) << owned.output;
}

TEST_F(SweepCli, ListPrintsIndexNameAndValuesAndStatusNeedsASweepDirectory) {
  const auto list = sweep(
      "random:\n  samples: 3\n  seed: 1\n  params:\n    optimizer.lr: {log_uniform: [1.0e-4, 1.0e-2]}\n", "--list");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_EQ(count_of(list.output, "\toptimizer.lr="), 3u) << list.output;
  EXPECT_EQ(list.output.rfind("0\tlr", 0), 0u) << list.output;
  EXPECT_FALSE(fs::exists(dir_ / "out")) << "--list starts nothing";
  const auto again = sweep(
      "random:\n  samples: 3\n  seed: 1\n  params:\n    optimizer.lr: {log_uniform: [1.0e-4, 1.0e-2]}\n", "--list");
  EXPECT_EQ(again.output, list.output) << "seeded: the same trials every time";

  const auto status = run_finetune("sweep --status " + shell_quote(dir_.path().string()));
  EXPECT_EQ(status.exit_code, 2);
  EXPECT_NE(status.output.find("holds no sweep"), std::string::npos) << status.output;
  const auto both = sweep("grid:\n  optimizer.lr: [1.0e-3]\n", "--list --index 0");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  const auto missing = run_finetune("sweep --config " + shell_quote(base_.string()));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("--sweep"), std::string::npos) << missing.output;
  const auto help = run_finetune("sweep --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("Examples:"), std::string::npos);
  EXPECT_NE(help.output.find("--index $SLURM_ARRAY_TASK_ID"), std::string::npos);
}

}  // namespace
}  // namespace ft::test

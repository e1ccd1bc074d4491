// `finetune config show|validate` end to end: the binary's output and exit codes for good and bad configs.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "config_test_util.h"

namespace ft::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ConfigCli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "train.jsonl", "{\"text\": \"hi\"}\n");
    write_file(dir_ / "base.yaml", "tokenizer: {train_vocab_size: 64}\ndata:\n  train: [{path: train.jsonl, format: text}]\n");
  }
  std::string cfg(const std::string& name, const std::string& text) {
    write_file(dir_ / name, text);
    return shell_quote((dir_ / name).string());
  }
  std::string at(const std::string& name, int line, int col) const {
    return (dir_ / name).string() + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
  }
  ScratchDir dir_{"ft-config-cli"};
};

TEST_F(ConfigCli, ValidatePrintsOkForAGoodConfig) {
  const auto r = run_finetune("config validate --config " + cfg("ok.yaml", "defaults: [base.yaml]\n"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("config OK"));
}

TEST_F(ConfigCli, ValidateLoadsTheTokenizerSoABrokenOneFailsThere) {
  std::filesystem::create_directories(dir_ / "tok");
  write_file(dir_ / "tok" / "tokenizer.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
  const auto r = run_finetune("config validate --config " +
                              cfg("tok.yaml", "defaults: [base.yaml]\ntokenizer: {train_vocab_size: 0, path: tok}\n"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("tokenizer.json"));
  EXPECT_THAT(r.output, HasSubstr("Unigram"));
  EXPECT_THAT(r.output, Not(HasSubstr("config OK")));
}

TEST_F(ConfigCli, ShowPrintsTheResolvedConfigWithOverrides) {
  const auto r = run_finetune("config show --config " + cfg("ok.yaml", "defaults: [base.yaml]\nrun: {name: n1}\n") +
                              " train.max_steps=7 'optimizer.betas=[0.8,0.9]'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("  name: n1\n  output_dir: runs/n1\n"));
  EXPECT_THAT(r.output, HasSubstr("  max_steps: 7\n"));
  EXPECT_THAT(r.output, HasSubstr("  betas: [0.8, 0.9]\n"));
  EXPECT_THAT(r.output, HasSubstr("    - path: " + (dir_ / "train.jsonl").string() + "\n"));
  // The printed config is itself a valid config.
  write_file(dir_ / "shown.yaml", r.output);
  const auto again = run_finetune("config show --config " + shell_quote((dir_ / "shown.yaml").string()));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output, r.output);
}

TEST_F(ConfigCli, UnknownKeyExitsTwoWithPositionAndSuggestion) {
  const auto r = run_finetune("config validate --config " +
                              cfg("bad.yaml", "defaults: [base.yaml]\noptimizer:\n  wieght_decay: 0.1\n"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(at("bad.yaml", 3, 3) + "optimizer.wieght_decay: unknown key; did you mean "
                                  "optimizer.weight_decay?"));
}

TEST_F(ConfigCli, WrongTypeExitsTwo) {
  const auto r = run_finetune("config validate --config " +
                              cfg("bad.yaml", "defaults: [base.yaml]\ntrain:\n  micro_batch_size: eight\n"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(at("bad.yaml", 3, 21) + "train.micro_batch_size: wrong type (expected an "
                                  "integer, got 'eight')"));
}

TEST_F(ConfigCli, BadOverrideExitsTwo) {
  const auto file = cfg("ok.yaml", "defaults: [base.yaml]\n");
  auto r = run_finetune("config show --config " + file + " optimizer.lr");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("<override 'optimizer.lr'>: optimizer.lr: not of the form key=value"));
  r = run_finetune("config validate --config " + file + " optimizer.lrr=0.1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("<override 'optimizer.lrr=0.1'>: optimizer.lrr: unknown key; did you mean "
                                  "optimizer.lr?"));
  r = run_finetune("config validate --config " + file + " 'optimizer.betas=[0.9'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot parse the value as YAML"));
}

TEST_F(ConfigCli, MissingBaseExitsTwo) {
  const auto r = run_finetune("config validate --config " + cfg("bad.yaml", "defaults: [base.yaml, gone.yaml]\n"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(at("bad.yaml", 1, 23) + "defaults: base file '" + (dir_ / "gone.yaml").string() +
                                  "' not found"));
}

TEST_F(ConfigCli, CycleExitsTwo) {
  cfg("a.yaml", "defaults: [b.yaml]\n");
  cfg("b.yaml", "defaults: [a.yaml]\n");
  const auto r = run_finetune("config validate --config " + shell_quote((dir_ / "a.yaml").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(at("b.yaml", 1, 12) + "defaults: composition cycle: "));
}

TEST_F(ConfigCli, MissingConfigFileExitsTwo) {
  const auto r = run_finetune("config validate --config " + shell_quote((dir_ / "none.yaml").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("not found"));
}

TEST_F(ConfigCli, HelpHasExamples) {
  for (const char* sub : {"config", "config show", "config validate"}) {
    const auto r = run_finetune(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_THAT(r.output, HasSubstr("Example")) << sub;
  }
}

}  // namespace
}  // namespace ft::test

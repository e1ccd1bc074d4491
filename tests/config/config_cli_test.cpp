// `finetune config show|validate` end to end: the binary's output and exit codes for good and bad configs.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <sstream>
#include <string>

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

// "config OK" means the run will start: the data files and the device are checked as training checks them.
TEST_F(ConfigCli, ValidateChecksTheDataFilesAndTheDeviceAsTrainingWould) {
  const std::string ok = cfg("ok.yaml", "defaults: [base.yaml]\n");
  const auto missing = run_finetune("config validate --config " + ok + " " +
                                    shell_quote("data.train=[{path: " + (dir_ / "missing.jsonl").string() +
                                                ", format: text}]"));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("data.train[0].path: file '" + (dir_ / "missing.jsonl").string() +
                                        "' does not exist"));
  EXPECT_THAT(missing.output, Not(HasSubstr("config OK")));

  write_file(dir_ / "empty.jsonl", "");
  const auto empty = run_finetune("config validate --config " + ok + " " +
                                  shell_quote("data.eval=[{path: " + (dir_ / "empty.jsonl").string() +
                                              ", format: text}]"));
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_THAT(empty.output, HasSubstr("data.eval[0].path: the file is empty"));

  const auto gpu = run_finetune("config validate --config " + ok + " run.device=cuda:63");
  EXPECT_EQ(gpu.exit_code, 2) << gpu.output;
  EXPECT_THAT(gpu.output, HasSubstr("cuda:63"));
}

TEST_F(ConfigCli, AnInvalidChoiceSuggestsTheNearestValue) {
  const auto r = run_finetune("config validate --config " + cfg("ok.yaml", "defaults: [base.yaml]\n") +
                              " scheduler.type=cosin train.precision=bf61");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("scheduler.type: invalid value 'cosin' (expected one of: constant, linear, cosine, "
                                  "wsd); did you mean 'cosine'?"));
  EXPECT_THAT(r.output, HasSubstr("did you mean 'bf16'?"));
}

TEST_F(ConfigCli, ValidateWarnsWhenSeqLenExceedsTheModelsContext) {
  std::filesystem::create_directories(dir_ / "short");
  write_file(dir_ / "short" / "config.json", "{\"model_type\": \"llama\", \"max_position_embeddings\": 16}");
  const auto r = run_finetune("config validate --config " + cfg("ok.yaml", "defaults: [base.yaml]\n") +
                              " data.seq_len=64 model.path=" + shell_quote((dir_ / "short").string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("warning: data.seq_len 64 exceeds the model's max_position_embeddings 16"));
  EXPECT_THAT(r.output, HasSubstr("config OK"));
  // A multimodal checkpoint's language model (Gemma 3) has its context length in text_config.
  std::filesystem::create_directories(dir_ / "multimodal");
  write_file(dir_ / "multimodal" / "config.json",
             "{\"model_type\": \"gemma3\", \"text_config\": {\"max_position_embeddings\": 32}}");
  const auto nested = run_finetune("config validate --config " + cfg("ok2.yaml", "defaults: [base.yaml]\n") +
                                   " data.seq_len=64 model.path=" + shell_quote((dir_ / "multimodal").string()));
  EXPECT_EQ(nested.exit_code, 0) << nested.output;
  EXPECT_THAT(nested.output, HasSubstr("exceeds the model's max_position_embeddings 32"));
}

// lora.targets are checked against the model's own projections (model.path's config.json) before any weight loads,
// as training checks them after: a name of another family, or a layer past the model's, fails with exit code 2.
TEST_F(ConfigCli, ValidateChecksLoraTargetsAgainstTheModelsProjections) {
  std::filesystem::create_directories(dir_ / "llm");
  write_file(dir_ / "llm" / "config.json",
             R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, )"
             R"("num_hidden_layers": 2, "num_attention_heads": 2})");
  const std::string lora = cfg("lora.yaml", "defaults: [base.yaml]\nlora: {enabled: true, rank: 4}\n");
  const std::string model = " model.path=" + shell_quote((dir_ / "llm").string());
  const auto fused = run_finetune("config validate --config " + lora + model + " 'lora.targets=[qkv_proj]'");
  EXPECT_EQ(fused.exit_code, 2) << fused.output;
  EXPECT_THAT(fused.output, HasSubstr("lora.targets: llama has no projection 'qkv_proj' to adapt"));
  EXPECT_THAT(fused.output, Not(HasSubstr("config OK")));
  const auto past = run_finetune("config validate --config " + lora + model +
                                 " 'lora.targets=[model.layers.2.mlp.down_proj]'");  // layers 0 and 1
  EXPECT_EQ(past.exit_code, 2) << past.output;
  EXPECT_THAT(past.output, HasSubstr("no projection 'model.layers.2.mlp.down_proj'"));
  const auto ok = run_finetune("config validate --config " + lora + model + " 'lora.targets=[q_proj, v_proj]'");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("lora: rank 4 on q_proj, v_proj\n"));
  EXPECT_THAT(ok.output, HasSubstr("config OK"));
}

// An MoE model's targets too: a per-expert projection name is refused with the experts' fused names in the hint.
TEST_F(ConfigCli, ValidateChecksLoraTargetsOfAnMoeModel) {
  std::filesystem::create_directories(dir_ / "moe");
  write_file(dir_ / "moe" / "config.json",
             R"({"model_type": "qwen3_moe", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, )"
             R"("moe_intermediate_size": 8, "num_experts": 4, "num_experts_per_tok": 2, "head_dim": 8, )"
             R"("num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1})");
  const std::string lora = cfg("lora.yaml", "defaults: [base.yaml]\nlora: {enabled: true, rank: 4}\n");
  const std::string model = " model.path=" + shell_quote((dir_ / "moe").string());
  const auto per_expert = run_finetune("config validate --config " + lora + model + " 'lora.targets=[gate_proj]'");
  EXPECT_EQ(per_expert.exit_code, 2) << per_expert.output;
  EXPECT_THAT(per_expert.output,
              HasSubstr("lora.targets: 'gate_proj' names one projection of the experts of qwen3_moe"));
  const auto ok =
      run_finetune("config validate --config " + lora + model + " 'lora.targets=[q_proj, gate_up_proj, gate]'");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("lora: rank 4 on q_proj, gate_up_proj, gate\n"));
  EXPECT_THAT(ok.output, HasSubstr("config OK"));
}

TEST_F(ConfigCli, ShowMarksFromScratchModelKeysUnusedWhenModelPathIsSet) {
  std::filesystem::create_directories(dir_ / "hf");
  write_file(dir_ / "hf" / "config.json", "{\"model_type\": \"llama\", \"hidden_size\": 64}");
  const auto r = run_finetune("config show --config " + cfg("ok.yaml", "defaults: [base.yaml]\n") +
                              " model.path=" + shell_quote((dir_ / "hf").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("  hidden_size: 256  # unused: model.path is set, its config.json decides\n"));
  EXPECT_THAT(r.output, HasSubstr("  num_layers: 4  # unused"));
  EXPECT_THAT(r.output, HasSubstr("  dtype: fp32\n"));  // read with a model.path too
  const auto scratch = run_finetune("config show --config " + cfg("ok.yaml", "defaults: [base.yaml]\n"));
  EXPECT_THAT(scratch.output, Not(HasSubstr("# unused")));
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

// An unfinished config shows what resolves, with what validate refuses listed at the top and marked at its key.
TEST_F(ConfigCli, ShowPrintsAnIncompleteConfigWithWhatItLacksMarked) {
  const std::string file = cfg("new.yaml", "tokenizer: {train_vocab_size: 64}\ntrain: {max_steps: 5}\n");
  const auto r = run_finetune("config show --config " + file + " optimizer.lr=-1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("# Not a valid config yet: `finetune config validate` and `train` refuse it until "
                                  "these 2 are fixed:\n"));
  EXPECT_THAT(r.output, HasSubstr("#   " + (dir_ / "new.yaml").string() +
                                  ": data.train: empty (expected at least one training source)\n"));
  EXPECT_THAT(r.output, HasSubstr("#   <override 'optimizer.lr=-1'>: optimizer.lr: "));
  EXPECT_THAT(r.output, HasSubstr("\n  train: []  # invalid: empty (expected at least one training source)\n"));
  EXPECT_THAT(r.output, HasSubstr("\n  lr: -1  # invalid: "));
  EXPECT_THAT(r.output, HasSubstr("  max_steps: 5\n"));  // what resolves, with the defaults
  EXPECT_THAT(r.output, HasSubstr("  micro_batch_size: 8\n"));
  EXPECT_THAT(r.output, HasSubstr("2 settings to fix before the config is valid"));
  // The printed text (stdout: the output here also holds stderr's "finetune ..." lines) is YAML that loads the same
  // way; validate still refuses the config.
  std::string shown;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("finetune", 0) != 0) shown += line + "\n";
  }
  write_file(dir_ / "shown.yaml", shown);
  const auto again = run_finetune("config show --config " + shell_quote((dir_ / "shown.yaml").string()));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("  train: []  # invalid: empty"));
  const auto validate = run_finetune("config validate --config " + file);
  EXPECT_EQ(validate.exit_code, 2) << validate.output;
  EXPECT_THAT(validate.output, HasSubstr("data.train: empty (expected at least one training source)"));
  // A list element's problem is marked at its own line.
  const auto missing = run_finetune("config show --config " + file + " " +
                                    shell_quote("data.train=[{path: " + (dir_ / "gone.jsonl").string() + "}]"));
  ASSERT_EQ(missing.exit_code, 0) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("    - path: " + (dir_ / "gone.jsonl").string() + "  # invalid: file '"));
  // A config that cannot be read has nothing to show.
  const auto typo = run_finetune("config show --config " + file + " train.max_stepz=5");
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_THAT(typo.output, HasSubstr("did you mean train.max_steps?"));
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

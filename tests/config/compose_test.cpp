// Composition (`defaults:`), merge order, cycles, missing bases and relative path resolution.
#include "config_test_util.h"

namespace ft::test {
namespace {

using config::load_config;
using ::testing::HasSubstr;

using ConfigCompose = ConfigDir;

TEST_F(ConfigCompose, BasesApplyInOrderThenTheIncludingFileWins) {
  put("a.yaml", "optimizer: {lr: 0.1, eps: 1e-3}\ndata: {seq_len: 100}\nlora: {targets: [q_proj, k_proj, v_proj]}\n");
  put("b.yaml", "optimizer: {lr: 0.2}\nrun: {name: from-b}\n");
  const auto loaded = load(std::string("defaults: [a.yaml, b.yaml]\n") + kMinimalConfig +
                           "run:\n  seed: 5\nlora:\n  targets: [o_proj]\n");
  const Config& c = loaded.config;
  EXPECT_EQ(c.optimizer.lr, 0.2);                                     // b after a
  EXPECT_EQ(c.optimizer.eps, 1e-3);                                   // maps merge key by key
  EXPECT_EQ(c.data.seq_len, 100);                                     // from a, untouched by the rest
  EXPECT_EQ(c.run.name, "from-b");                                    // deep merge keeps b's run.name ...
  EXPECT_EQ(c.run.seed, 5);                                           // ... beside the file's run.seed
  EXPECT_EQ(c.lora.targets, std::vector<std::string>{"o_proj"});      // lists replace, never append
  ASSERT_EQ(loaded.sources.size(), 3u);
  EXPECT_EQ(loaded.sources[0].filename(), "a.yaml");
  EXPECT_EQ(loaded.sources[2].filename(), "config.yaml");
  EXPECT_EQ(loaded.where("optimizer.lr"), (dir_ / "b.yaml").string() + ":1:17");
}

TEST_F(ConfigCompose, OverridesWinOverEveryFile) {
  put("a.yaml", "optimizer: {lr: 0.1}\n");
  const auto loaded = load(std::string("defaults: [a.yaml]\n") + kMinimalConfig + "optimizer: {lr: 0.3}\n",
                           {"optimizer.lr=0.4"});
  EXPECT_EQ(loaded.config.optimizer.lr, 0.4);
}

TEST_F(ConfigCompose, NestedBasesResolveRelativeToTheIncludingFile) {
  put("common/root.yaml", "train: {micro_batch_size: 3}\n");
  put("sub/mid.yaml", "defaults: [../common/root.yaml]\ntrain: {grad_accum_steps: 4}\n");
  const auto loaded = load(std::string("defaults: sub/mid.yaml\n") + kMinimalConfig);
  EXPECT_EQ(loaded.config.train.micro_batch_size, 3);
  EXPECT_EQ(loaded.config.train.grad_accum_steps, 4);
}

TEST_F(ConfigCompose, MissingBaseFileIsErrorAtTheDefaultsEntry) {
  const auto msg = error_of(std::string("defaults: [nope.yaml]\n") + kMinimalConfig);
  EXPECT_THAT(msg, HasSubstr((dir_ / "config.yaml").string() + ":1:12: defaults: base file '" +
                             (dir_ / "nope.yaml").string() + "' not found"));
}

TEST_F(ConfigCompose, CycleIsErrorNamingTheChain) {
  put("a.yaml", "defaults: [b.yaml]\n");
  put("b.yaml", "defaults: [a.yaml]\n");
  const auto msg = error_of(std::string("defaults: [a.yaml]\n") + kMinimalConfig);
  const std::string d = dir_.path().string() + "/";
  EXPECT_THAT(msg, HasSubstr(d + "b.yaml:1:12: defaults: composition cycle: " + d + "config.yaml -> " + d +
                             "a.yaml -> " + d + "b.yaml -> " + d + "a.yaml"));
}

TEST_F(ConfigCompose, SelfIncludeIsCycle) {
  const auto msg = error_of(std::string("defaults: [config.yaml]\n") + kMinimalConfig);
  EXPECT_THAT(msg, HasSubstr("composition cycle: "));
}

TEST_F(ConfigCompose, DiamondIncludeIsNotACycle) {
  put("shared.yaml", "train: {epochs: 3}\n");
  put("a.yaml", "defaults: [shared.yaml]\n");
  put("b.yaml", "defaults: [shared.yaml]\n");
  EXPECT_EQ(load(std::string("defaults: [a.yaml, b.yaml]\n") + kMinimalConfig).config.train.epochs, 3);
}

TEST_F(ConfigCompose, RelativeFilePathsResolveAgainstTheFileThatSetThem) {
  put("sub/data.jsonl", "{}\n");
  put("sub/tok.model", "x");
  put("sub/model/config.json", "{}");
  put("sub/base.yaml",
      "data:\n  train: [{path: data.jsonl, format: text}]\n  eval: [{path: ./data.jsonl}]\n  cache_dir: cache\n"
      "tokenizer: {path: tok.model}\nmodel: {path: model}\n");
  const auto loaded = load("defaults: [sub/base.yaml]\n");
  const Config& c = loaded.config;
  const auto sub = dir_ / "sub";
  EXPECT_EQ(c.data.train.at(0).path, (sub / "data.jsonl").string());
  EXPECT_EQ(c.data.eval.at(0).path, (sub / "data.jsonl").string());
  EXPECT_EQ(c.data.cache_dir, (sub / "cache").string());
  EXPECT_EQ(c.tokenizer.path, (sub / "tok.model").string());
  EXPECT_EQ(c.model.path, (sub / "model").string());
  EXPECT_EQ(c.run.output_dir, "runs/run");  // the run directory stays relative to where finetune runs
}

TEST_F(ConfigCompose, AbsolutePathsAreKept) {
  const auto file = (dir_ / "train.jsonl").string();
  const auto loaded = load("tokenizer: {train_vocab_size: 8}\ndata: {train: [{path: " + file + "}]}\n");
  EXPECT_EQ(loaded.config.data.train.at(0).path, file);
}

TEST_F(ConfigCompose, OverridePathsResolveAgainstTheCurrentDirectory) {
  const auto saved = std::filesystem::current_path();
  put("cwd/here.jsonl", "{}\n");
  std::filesystem::current_path(dir_ / "cwd");
  std::string path;
  try {
    path = load(kMinimalConfig, {"data.train=[{path: here.jsonl}]"}).config.data.train.at(0).path;
  } catch (...) {
    std::filesystem::current_path(saved);
    throw;
  }
  std::filesystem::current_path(saved);
  EXPECT_EQ(std::filesystem::weakly_canonical(path), std::filesystem::weakly_canonical(dir_ / "cwd" / "here.jsonl"));
}

TEST_F(ConfigCompose, EmptySectionKeepsDefaults) {
  const auto loaded = load(std::string(kMinimalConfig) + "run:\noptimizer: {}\n");
  EXPECT_EQ(loaded.config.run.output_dir, "runs/run");
  EXPECT_EQ(loaded.config.optimizer.lr, 3e-4);
}

}  // namespace
}  // namespace ft::test

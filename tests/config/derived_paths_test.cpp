// config::fill_derived_paths: the files a run makes for itself are named in its config, as absolute paths under the
// run directory, only where the config names none.
#include <gtest/gtest.h>

#include <filesystem>

#include "config/derived_paths.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;

Config synth_config() {
  Config c;
  c.run.output_dir = "runs/x";
  c.data.synth.task = "reverse";
  c.data.synth.train_samples = 10;
  c.data.synth.eval_samples = 5;
  c.data.train = {DataSource{}};
  c.data.eval = {DataSource{}};
  c.tokenizer.train_vocab_size = 300;
  return c;
}

TEST(DerivedPaths, SyntheticDataAndATrainedTokenizerGetAbsolutePathsInTheRunDirectory) {
  Config c = synth_config();
  config::fill_derived_paths(c);
  const fs::path run = fs::absolute("runs/x");
  EXPECT_EQ(c.data.train[0].path, (run / "data" / "reverse-train.jsonl").string());
  EXPECT_EQ(c.data.eval[0].path, (run / "data" / "reverse-eval.jsonl").string());
  EXPECT_EQ(c.tokenizer.path, (run / "tokenizer" / "tokenizer.model").string());
  const Config once = c;
  config::fill_derived_paths(c);
  EXPECT_EQ(c.data.train[0].path, once.data.train[0].path);
  EXPECT_EQ(c.tokenizer.path, once.tokenizer.path);
}

TEST(DerivedPaths, NamedFilesModelTokenizersAndSplitsWithoutSamplesAreLeftAlone) {
  Config c = synth_config();
  c.data.train[0].path = "/data/mine.jsonl";
  c.data.synth.eval_samples = 0;
  c.tokenizer.path = "/tok/sp.model";
  config::fill_derived_paths(c);
  EXPECT_EQ(c.data.train[0].path, "/data/mine.jsonl");
  EXPECT_EQ(c.data.eval[0].path, "");
  EXPECT_EQ(c.tokenizer.path, "/tok/sp.model");

  Config pretrained = synth_config();
  pretrained.model.path = "/models/llama";
  pretrained.data.synth.task.clear();
  config::fill_derived_paths(pretrained);
  EXPECT_EQ(pretrained.tokenizer.path, "") << "the model directory's tokenizer is used";
  EXPECT_EQ(pretrained.data.train[0].path, "") << "no synthetic task: nothing to generate";
}

}  // namespace
}  // namespace ft::test

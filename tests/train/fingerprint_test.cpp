// train::make_fingerprint / fingerprint_differences: a checkpoint resumes when the model's shape and the settings
// config.h marks kMustMatch are the same (a data source may be the same file named another way); the refusal names
// each difference; checkpoints of the layout before the marks still resume.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/resume_keys.h"
#include "support/test_support.h"
#include "train/fingerprint.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;
using train::fingerprint_differences;
using train::make_fingerprint;

Config config_with(const std::string& data_path, int64_t seq_len = 32) {
  Config c;
  c.data.train = {DataSource{data_path, SourceFormat::kPromptCompletion, 1.0}};
  c.data.seq_len = seq_len;
  return c;
}

model::ModelArgs shape(int64_t hidden = 64) {
  model::ModelArgs a;
  a.vocab_size = 100;
  a.hidden_size = hidden;
  a.intermediate_size = 2 * hidden;
  a.num_layers = 2;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = hidden / 4;
  return a;
}

TEST(Fingerprint, MarkedKeysAreTheSettingsThatShapeTheModelOrTheData) {
  const std::vector<std::string> want = {"model.quantize",
                                         "model.random_weights",
                                         "lora.enabled",
                                         "lora.rank",
                                         "lora.targets",
                                         "tokenizer.add_tokens",
                                         "data.train",
                                         "data.template",
                                         "data.seq_len",
                                         "data.packing",
                                         "train.objective",
                                         "train.micro_batch_size",
                                         "train.grad_accum_steps",
                                         "optimizer.name",
                                         "optimizer.kahan_summation"};
  EXPECT_EQ(config::must_match_keys(), want);
  const auto values = config::must_match_values(config_with("/d/a.jsonl", 48));
  EXPECT_EQ(values.at("data.seq_len"), 48);
  EXPECT_EQ(values.at("data.train")[0].at("format"), "prompt_completion");
  EXPECT_EQ(values.at("model.quantize"), "none");
}

TEST(Fingerprint, TheSameDataFileNamedRelativeOrAbsoluteResumesAndOtherDifferencesAreNamed) {
  TempDir dir("ft-fingerprint");
  write_file(dir / "a.jsonl", "{}\n");
  write_file(dir / "b.jsonl", "{}\n");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  const std::string absolute_a = fs::absolute("a.jsonl").string();
  const std::string now = make_fingerprint(config_with(absolute_a), shape());
  EXPECT_TRUE(fingerprint_differences(now, now).empty());
  EXPECT_TRUE(fingerprint_differences(make_fingerprint(config_with("a.jsonl"), shape()), now).empty());
  EXPECT_EQ(fingerprint_differences(make_fingerprint(config_with("b.jsonl"), shape()), now).size(), 1u);
  EXPECT_EQ(fingerprint_differences(make_fingerprint(config_with("missing.jsonl"), shape()),
                                    make_fingerprint(config_with((dir / "missing.jsonl").string()), shape()))
                .size(),
            1u);
  EXPECT_EQ(fingerprint_differences(make_fingerprint(config_with(absolute_a, 64), shape()), now),
            std::vector<std::string>{"data.seq_len: 64 -> 32"});
  EXPECT_EQ(fingerprint_differences(make_fingerprint(config_with(absolute_a), shape(128)), now),
            (std::vector<std::string>{"model.head_dim: 32 -> 16", "model.hidden_size: 128 -> 64",
                                      "model.intermediate_size: 256 -> 128"}));
  Config nf4 = config_with(absolute_a);
  nf4.model.quantize = BaseQuantization::kNf4;
  EXPECT_EQ(fingerprint_differences(make_fingerprint(nf4, shape()), now),
            std::vector<std::string>{"model.quantize: nf4 -> none"});
  EXPECT_EQ(fingerprint_differences("not json", now).size(), 1u);
  fs::current_path(cwd);
}

TEST(Fingerprint, AKeyTheCheckpointDoesNotRecordIsNotCompared) {
  const std::string now = make_fingerprint(config_with("/d/a.jsonl"), shape());
  auto saved = nlohmann::json::parse(now);
  saved["settings"].erase("model.quantize");  // as a checkpoint written before model.quantize was marked
  Config nf4 = config_with("/d/a.jsonl");
  nf4.model.quantize = BaseQuantization::kNf4;
  EXPECT_TRUE(fingerprint_differences(saved.dump(), make_fingerprint(nf4, shape())).empty());
}

// The fingerprint as checkpoints held it before the marks: positional arrays, no "format".
std::string legacy_print(const std::string& path, int64_t seq_len, const model::ModelArgs& a, bool lora) {
  nlohmann::json f;
  f["model"] = {a.model_type, a.vocab_size,   a.hidden_size, a.intermediate_size,  a.num_layers,
                a.num_heads,  a.num_kv_heads, a.head_dim,    a.tie_word_embeddings};
  f["lora"] = lora ? nlohmann::json{8, std::vector<std::string>{"q_proj", "v_proj"}} : nlohmann::json();
  f["data"] = {seq_len, false, "auto", 8, 1};
  f["data_sources"] = nlohmann::json::array({nlohmann::json{path, "prompt_completion", 1.0}});
  return f.dump();
}

TEST(Fingerprint, CheckpointsOfTheLayoutBeforeTheMarksStillResume) {
  TempDir dir("ft-fingerprint-legacy");
  write_file(dir / "a.jsonl", "{}\n");
  const std::string a = (dir / "a.jsonl").string();
  const std::string now = make_fingerprint(config_with(a), shape());
  EXPECT_TRUE(fingerprint_differences(legacy_print(a, 32, shape(), false), now).empty());
  const std::string dotted = (dir / "." / "a.jsonl").string();  // the same file, named another way
  EXPECT_TRUE(fingerprint_differences(legacy_print(dotted, 32, shape(), false), now).empty());
  EXPECT_EQ(fingerprint_differences(legacy_print(a, 64, shape(), false), now).size(), 1u);
  EXPECT_EQ(fingerprint_differences(legacy_print(a, 32, shape(128), false), now).size(), 1u);
  EXPECT_EQ(fingerprint_differences(legacy_print(a, 32, shape(), true), now).size(), 1u);
  Config lora = config_with(a);
  lora.lora.enabled = true;
  EXPECT_TRUE(fingerprint_differences(legacy_print(a, 32, shape(), true), make_fingerprint(lora, shape())).empty());
}

}  // namespace
}  // namespace ft::test

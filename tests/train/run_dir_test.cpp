// The run directory keeps what a person relies on: a refused resume names the settings that differ and leaves
// config.yaml as it was, a resume with changed settings keeps the earlier config in config_history/, and running a
// finished run again says so without rewriting its checkpoints or final model. On a terminal the progress bar stays at
// the bottom while log lines scroll above it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "train/train_support.h"
#include "util/error.h"
#include "util/file_writer.h"

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
  // A rerun with other settings that does not train keeps the config that trained the model.
  const std::string first_config = read_file(run_dir / "config.yaml");
  const auto changed = run(train_cmd(config, "train.max_steps=10 optimizer.lr=0.5"));
  EXPECT_EQ(changed.exit_code, 0) << changed.output;
  EXPECT_NE(changed.output.find("the run is complete"), std::string::npos) << changed.output;
  EXPECT_EQ(read_file(run_dir / "config.yaml"), first_config);
  EXPECT_FALSE(fs::exists(run_dir / "config_history"));

  // Raising max_steps continues the run, and the earlier config is kept.
  const auto longer = run(train_cmd(config, "train.max_steps=12"));
  EXPECT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_NE(longer.output.find("resum"), std::string::npos) << longer.output;
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step-000012"));
  EXPECT_EQ(read_file(run_dir / "config_history" / "1.yaml"), first_config);
  EXPECT_NE(read_file(run_dir / "config.yaml").find("max_steps: 12"), std::string::npos);
}

// With two ranks too: whether the run is complete is asked on every rank (it is a collective), so the rerun ends
// on both instead of leaving rank 0 waiting in a broadcast the others never join.
TEST_F(TrainRunDir, FinishedTwoRankRunRerunSaysItIsComplete) {
  const auto config = write_config("f2");
  ASSERT_EQ(run(train_cmd(config, "--nproc-per-node 2 train.max_steps=10")).exit_code, 0);
  const auto again = run(train_cmd(config, "--nproc-per-node 2 train.max_steps=10 optimizer.lr=0.5"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("the run is complete: step 10 of 10"), std::string::npos) << again.output;
  EXPECT_FALSE(fs::exists(dir_ / "f2" / "config_history"));
}

// A run that would start at step 0 in a directory holding a finished run is refused (exit 2) and changes nothing
// there; --overwrite deletes that run's files (not the user's own) and trains again, so metrics.jsonl and
// checkpoints hold the new run only, and config.yaml does not carry the overwrite into a later rerun.
TEST_F(TrainRunDir, NewRunOverAnEarlierRunIsRefusedUntilOverwriteDeletesIt) {
  const auto config = write_config("o");
  ASSERT_EQ(run(train_cmd(config, "train.max_steps=10")).exit_code, 0);
  const auto run_dir = dir_ / "o";
  write_file(run_dir / "notes.txt", "mine");
  const auto model_time = fs::last_write_time(run_dir / "model" / "model.safetensors");
  const std::string metrics = read_file(run_dir / "metrics.jsonl");

  const auto refused = run(train_cmd(config, "train.max_steps=6 checkpoint.resume=never"));
  EXPECT_EQ(refused.exit_code, static_cast<int>(ExitCode::kUsage)) << refused.output;
  EXPECT_NE(refused.output.find("already holds a run (metrics.jsonl, checkpoints/step-000010, model/)"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("--overwrite"), std::string::npos) << refused.output;
  EXPECT_EQ(read_file(run_dir / "metrics.jsonl"), metrics);
  EXPECT_EQ(fs::last_write_time(run_dir / "model" / "model.safetensors"), model_time);

  const auto again = run(train_cmd(config, "train.max_steps=6 checkpoint.every_steps=3 --overwrite"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("run.overwrite: deleted the earlier run's"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("starting a new run"), std::string::npos) << again.output;
  EXPECT_EQ(losses(run_dir).size(), 6u);
  EXPECT_FALSE(fs::exists(run_dir / "checkpoints" / "step-000010"));
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step-000006"));
  EXPECT_EQ(read_file(run_dir / "notes.txt"), "mine");
  EXPECT_NE(read_file(run_dir / "config.yaml").find("overwrite: false"), std::string::npos);

  // --overwrite never deletes what the config reads: data under checkpoints/ stays, and the run is refused first.
  fs::create_directories(run_dir / "checkpoints" / "kept");
  write_file(run_dir / "checkpoints" / "kept" / "train.jsonl", R"({"prompt": "a", "completion": "b"})"
                                                               "\n");
  const auto inputs = run(train_cmd(
      config, "--overwrite 'data.train=[{path: " + (run_dir / "checkpoints" / "kept" / "train.jsonl").string() +
                  ", format: prompt_completion}]'"));
  EXPECT_EQ(inputs.exit_code, static_cast<int>(ExitCode::kUsage)) << inputs.output;
  EXPECT_NE(inputs.output.find("run.overwrite would delete checkpoints, which holds data.train[0].path"),
            std::string::npos)
      << inputs.output;
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step-000006"));
  fs::remove_all(run_dir / "checkpoints" / "kept");

  // Run again from its config.yaml: complete, nothing deleted.
  const auto rerun = run(train_cmd(run_dir / "config.yaml"));
  EXPECT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("the run is complete: step 6 of 6"), std::string::npos) << rerun.output;
}

// --overwrite whose inputs fail once read (a data file that is not JSON lines) ends with that error and puts the
// earlier run back as it was (its train.log goes on with this attempt's lines and its final error): a bad config
// never costs the run it would have replaced.
TEST_F(TrainRunDir, OverwriteThatFailsBeforeTrainingPutsTheEarlierRunBack) {
  const auto config = write_config("ob");
  ASSERT_EQ(run(train_cmd(config, "train.max_steps=6 checkpoint.every_steps=3")).exit_code, 0);
  const auto run_dir = dir_ / "ob";
  const std::string metrics = read_file(run_dir / "metrics.jsonl");
  const std::string log = read_file(run_dir / "train.log");
  const std::string config_yaml = read_file(run_dir / "config.yaml");
  const auto model_time = fs::last_write_time(run_dir / "model" / "model.safetensors");
  write_file(dir_ / "bad.jsonl", "not json\n");

  const auto failed = run(train_cmd(
      config, "--overwrite 'data.train=[{path: " + (dir_ / "bad.jsonl").string() + ", format: prompt_completion}]'"));
  EXPECT_NE(failed.exit_code, 0) << failed.output;
  EXPECT_NE(failed.output.find("bad.jsonl:1"), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("are back in place"), std::string::npos) << failed.output;
  EXPECT_EQ(read_file(run_dir / "metrics.jsonl"), metrics);
  // The earlier run's log, then this attempt's up to the failure.
  const std::string log_after = read_file(run_dir / "train.log");
  EXPECT_EQ(log_after.rfind(log, 0), 0u);
  EXPECT_NE(log_after.find("are back in place", log.size()), std::string::npos) << log_after;
  EXPECT_NE(log_after.find("bad.jsonl:1", log.size()), std::string::npos) << log_after;  // the final error too
  EXPECT_EQ(read_file(run_dir / "config.yaml"), config_yaml);
  EXPECT_EQ(fs::last_write_time(run_dir / "model" / "model.safetensors"), model_time);
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step-000006"));
  EXPECT_FALSE(fs::exists(run_dir / ".overwritten"));

  const auto rerun = run(train_cmd(config, "train.max_steps=6 checkpoint.every_steps=3"));
  EXPECT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("the run is complete: step 6 of 6"), std::string::npos) << rerun.output;
}

// A process killed while the earlier run was set aside leaves it in .overwritten/ (the manifest lists what was to
// move; what it names but does not hold had not moved yet): the next train into the directory puts it back first,
// over what the killed run wrote at those paths, and then finds the earlier run complete.
TEST_F(TrainRunDir, EarlierRunLeftAsideByAKilledOverwriteIsPutBack) {
  const auto config = write_config("ok");
  ASSERT_EQ(run(train_cmd(config, "train.max_steps=6 checkpoint.every_steps=3")).exit_code, 0);
  const auto run_dir = dir_ / "ok";
  const auto aside = run_dir / ".overwritten";
  const std::string log = read_file(run_dir / "train.log");
  fs::create_directories(aside);
  write_file(aside / "MANIFEST", "config.yaml\ntrain.log\nmetrics.jsonl\ncheckpoints\nmodel\n");
  for (const char* name : {"train.log", "metrics.jsonl", "checkpoints"}) fs::rename(run_dir / name, aside / name);
  write_file(run_dir / "train.log", "the killed run's log\n");

  const auto rerun = run(train_cmd(config, "train.max_steps=6 checkpoint.every_steps=3"));
  EXPECT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("left the earlier run's train.log, metrics.jsonl, checkpoints set aside; put back"),
            std::string::npos)
      << rerun.output;
  EXPECT_NE(rerun.output.find("the run is complete: step 6 of 6"), std::string::npos) << rerun.output;
  EXPECT_EQ(read_file(run_dir / "train.log").rfind(log, 0), 0u) << "the earlier log, then the rerun's lines";
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step-000006"));
  EXPECT_FALSE(fs::exists(aside));
}

// What no setting pins is warned about on resume, and the run goes on: the training data rewritten with as many
// records (two lines swapped), and a LoRA base directory holding other weights of the same shape. Unchanged inputs
// resume without a word.
TEST_F(TrainRunDir, ResumeWarnsWhenTheDataOrTheLoraBaseChangedUnderIt) {
  const std::string warning = "is not what the checkpoint's run read";
  const auto config = write_config("rd");
  ASSERT_EQ(run(train_cmd(config, "train.max_steps=6 checkpoint.every_steps=3")).exit_code, 0);
  const auto same = run(train_cmd(config, "train.max_steps=9 checkpoint.every_steps=3"));
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_EQ(same.output.find(warning), std::string::npos) << same.output;
  const auto data = dir_ / "rd" / "data" / "reverse-train.jsonl";
  std::string text = read_file(data);
  const size_t first_end = text.find('\n') + 1, second_end = text.find('\n', first_end) + 1;
  write_file(data,
             text.substr(first_end, second_end - first_end) + text.substr(0, first_end) + text.substr(second_end));
  const auto changed = run(train_cmd(config, "train.max_steps=12 checkpoint.every_steps=3"));
  ASSERT_EQ(changed.exit_code, 0) << changed.output;
  EXPECT_NE(changed.output.find("data.train[0] (" + data.string() + ") " + warning), std::string::npos)
      << changed.output;
  EXPECT_NE(changed.output.find("resumed from"), std::string::npos) << changed.output;

  // Two bases of one shape: the same run drawn from two seeds.
  ASSERT_EQ(run(train_cmd(write_config("base_a"), "train.max_steps=6")).exit_code, 0);
  ASSERT_EQ(run(train_cmd(write_config("base_b"), "train.max_steps=6 run.seed=6")).exit_code, 0);
  const auto base = dir_ / "base";
  fs::copy(dir_ / "base_a" / "model", base, fs::copy_options::recursive);
  const auto lora = dir_ / "lora.yaml";
  write_file(lora, "run: {output_dir: " + (dir_ / "lora").string() +
                       ", seed: 5, device: cpu, deterministic: true}\n"
                       "data: {train: [{path: " +
                       (dir_ / "base_a" / "data" / "reverse-train.jsonl").string() +
                       ", format: prompt_completion}], seq_len: 32, cache_dir: " + (dir_ / "cache").string() +
                       "}\n"
                       "model: {path: " +
                       base.string() +
                       "}\n"
                       "lora: {enabled: true, rank: 4, alpha: 8}\n"
                       "train: {max_steps: 6, micro_batch_size: 8}\n"
                       "checkpoint: {every_steps: 3}\n"
                       "logging: {every_steps: 1, progress: off}\n");
  ASSERT_EQ(run(train_cmd(lora)).exit_code, 0);
  const auto same_base = run(train_cmd(lora, "train.max_steps=9"));
  ASSERT_EQ(same_base.exit_code, 0) << same_base.output;
  EXPECT_EQ(same_base.output.find("holds other weights"), std::string::npos) << same_base.output;
  fs::copy_file(dir_ / "base_b" / "model" / "model.safetensors", base / "model.safetensors",
                fs::copy_options::overwrite_existing);
  const auto other_base = run(train_cmd(lora, "train.max_steps=12"));
  ASSERT_EQ(other_base.exit_code, 0) << other_base.output;
  EXPECT_NE(other_base.output.find("model.path (" + base.string() +
                                   ") holds other weights than those the "
                                   "checkpoint's adapters were trained on"),
            std::string::npos)
      << other_base.output;
}

// What a deletion after a committed --overwrite left (.overwritten.deleting/, even with its manifest) is never put
// back over the run that followed: the next start deletes it and finds that run complete.
TEST_F(TrainRunDir, ADeletionCutShortAfterOverwriteIsNotRestored) {
  const auto config = write_config("od");
  ASSERT_EQ(run(train_cmd(config, "train.max_steps=6 checkpoint.every_steps=3")).exit_code, 0);
  const auto run_dir = dir_ / "od";
  const auto left = run_dir / ".overwritten.deleting";
  fs::create_directories(left / "checkpoints" / "step-000009");
  write_file(left / "MANIFEST", "checkpoints\nmetrics.jsonl\n");
  write_file(left / "metrics.jsonl", "{}\n");
  const std::string metrics = read_file(run_dir / "metrics.jsonl");
  const auto rerun = run(train_cmd(config, "train.max_steps=6 checkpoint.every_steps=3"));
  EXPECT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("the run is complete: step 6 of 6"), std::string::npos) << rerun.output;
  EXPECT_EQ(read_file(run_dir / "metrics.jsonl"), metrics);
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "step-000006"));
  EXPECT_FALSE(fs::exists(left));
}

// Two runs into one directory would delete each other's temporary checkpoints and interleave their metrics: while
// another process holds the run directory's lock, a train into it is refused (exit 2) and writes nothing there.
TEST_F(TrainRunDir, ATrainIntoADirectoryInUseIsRefused) {
  const auto config = write_config("busy");
  fs::create_directories(dir_ / "busy");
  const auto held = FileLock::try_lock(dir_ / "busy" / ".train.lock");  // as a running train holds it
  ASSERT_TRUE(held.has_value());
  const auto refused = run(train_cmd(config, "train.max_steps=10"));
  EXPECT_EQ(refused.exit_code, static_cast<int>(ExitCode::kUsage)) << refused.output;
  EXPECT_NE(refused.output.find("is in use by another finetune train"), std::string::npos) << refused.output;
  EXPECT_TRUE(losses(dir_ / "busy").empty());
  EXPECT_FALSE(fs::exists(dir_ / "busy" / "config.yaml"));
}

// checkpoint.resume: auto in a directory whose run left metrics but no checkpoint (killed before its first one) has
// nothing to continue: refused like a new run, naming what is there.
TEST_F(TrainRunDir, AutoWithoutACheckpointToResumeIsRefusedOverAnEarlierRun) {
  const auto config = write_config("a");
  ASSERT_EQ(run(train_cmd(config, "train.max_steps=2 scheduler.warmup_steps=1")).exit_code, 0);
  const auto run_dir = dir_ / "a";
  fs::remove_all(run_dir / "checkpoints");
  const auto refused = run(train_cmd(config, "train.max_steps=4 scheduler.warmup_steps=1"));
  EXPECT_EQ(refused.exit_code, static_cast<int>(ExitCode::kUsage)) << refused.output;
  EXPECT_NE(refused.output.find("already holds a run (metrics.jsonl, model/)"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("no checkpoint to resume from"), std::string::npos) << refused.output;
}

// A tokenizer trained at the start reads the data with the dataset's own rules: data.on_error=skip skips a bad line
// (warned about once, by the dataset), and a bad line, a missing field or an empty file otherwise stop the run naming
// file:line, as they do when the tokenizer already exists.
TEST_F(TrainRunDir, TokenizerTrainedAtStartReadsTheDataWithTheDatasetRules) {
  const auto data = dir_ / "data.jsonl";
  std::string lines;
  for (int i = 0; i < 300; ++i) {
    lines += R"({"prompt": "Copy: )" + std::to_string(i * 7919 % 1000) + R"(\nAnswer:", "completion": " )" +
             std::to_string(i * 7919 % 1000) + "\"}\n";
    if (i == 2) lines += "{not json\n";
  }
  write_file(data, lines);
  auto config_for = [&](const std::string& name, const std::string& data_extra) {
    const auto path = dir_ / (name + ".yaml");
    write_file(path, "run: {output_dir: " + (dir_ / name).string() + ", device: cpu}\n"
                     "data: {train: [{path: " + data.string() + ", format: prompt_completion}], seq_len: 32,\n"
                     "       cache_dir: " + (dir_ / "cache").string() + data_extra + "}\n"
                     "tokenizer: {train_vocab_size: 300}\n"
                     "model: {hidden_size: 32, intermediate_size: 64, num_layers: 1, num_heads: 2, num_kv_heads: 2}\n"
                     "train: {max_steps: 1, micro_batch_size: 4}\n"
                     "logging: {progress: off}\n");
    return path;
  };
  const auto failed = run(train_cmd(config_for("fail", "")));
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_NE(failed.output.find(data.string() + ":4: "), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("data.on_error: skip"), std::string::npos) << failed.output;

  const auto skipped = run(train_cmd(config_for("skip", ", on_error: skip")));
  ASSERT_EQ(skipped.exit_code, 0) << skipped.output;
  const std::string warning = data.string() + ": skipped 1 bad line(s), first at line(s) 4";
  const auto first = skipped.output.find(warning);
  EXPECT_NE(first, std::string::npos) << skipped.output;
  EXPECT_EQ(skipped.output.find(warning, first + 1), std::string::npos) << "warned twice:\n" << skipped.output;

  const auto fields = run(train_cmd(config_for("fields", ", on_error: skip, fields: {prompt: question}")));
  EXPECT_NE(fields.exit_code, 0) << fields.output;
  EXPECT_NE(fields.output.find("question"), std::string::npos) << fields.output;
  EXPECT_NE(fields.output.find(data.string()), std::string::npos) << fields.output;

  write_file(data, "");
  const auto empty = run(train_cmd(config_for("empty", "")));
  EXPECT_EQ(empty.exit_code, 1) << empty.output;
  EXPECT_NE(empty.output.find(data.string() + ":1: the file is empty (no records)"), std::string::npos)
      << empty.output;
}

// Chat data on a model without a chat template trains in the plain format, and the run says so (as `config validate`
// does) instead of choosing silently; `data inspect` says it too.
TEST_F(TrainRunDir, ChatDataWithoutAModelTemplateSaysItUsesThePlainFormat) {
  const auto data = dir_ / "chat.jsonl";
  std::string lines;
  for (int i = 0; i < 200; ++i) {
    lines += R"({"messages": [{"role": "user", "content": "Say )" + std::to_string(i) +
             R"("}, {"role": "assistant", "content": ")" + std::to_string(i) + "\"}]}\n";
  }
  write_file(data, lines);
  const auto config = dir_ / "chat.yaml";
  write_file(config, "run: {output_dir: " + (dir_ / "chat").string() + ", device: cpu}\n"
                     "data: {train: [{path: " + data.string() + ", format: chat}], seq_len: 48,\n"
                     "       cache_dir: " + (dir_ / "cache").string() + "}\n"
                     "tokenizer: {train_vocab_size: 300}\n"
                     "model: {hidden_size: 32, intermediate_size: 64, num_layers: 1, num_heads: 2, num_kv_heads: 2}\n"
                     "train: {max_steps: 1, micro_batch_size: 4}\n"
                     "logging: {progress: off}\n");
  const std::string said = "chat template: plain (data.template is auto";
  const auto inspect = run(shell_quote(binary()) + " data inspect --config " + shell_quote(config.string()) + " --n 1");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find(said), std::string::npos) << inspect.output;
  const auto trained = run(train_cmd(config));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find(said), std::string::npos) << trained.output;
}

// The run directory's config.yaml is written after the synthetic data and the tokenizer were made, so it names
// them: training again from it resumes the run on the same files instead of generating or training anew.
TEST_F(TrainRunDir, ConfigYamlNamesTheGeneratedDataAndTrainedTokenizerAndARerunFromItResumes) {
  const auto config = write_config("g");
  const auto first = run(train_cmd(config, "train.max_steps=4 checkpoint.every_steps=2 scheduler.warmup_steps=1"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("generated 4000 synthetic 'reverse' samples"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("trained a 300-piece bpe tokenizer"), std::string::npos) << first.output;
  // The prompts hold "\n": sentencepiece's warning about the .vocab file's format must not reach the user.
  EXPECT_EQ(first.output.find("escaped characters"), std::string::npos) << first.output;
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

// Every piece of terminal output between carriage returns and line feeds, without escape sequences (colours, clear
// to end of line): what one redraw or one log line leaves on a row, as the user reads it.
std::vector<std::string> screen_pieces(const std::string& output) {
  std::vector<std::string> pieces;
  std::string piece;
  for (size_t i = 0; i <= output.size(); ++i) {
    if (i == output.size() || output[i] == '\r' || output[i] == '\n') {
      if (!piece.empty()) pieces.push_back(piece);
      piece.clear();
    } else if (output[i] == '\033' && i + 1 < output.size() && output[i + 1] == '[') {
      i += 2;
      while (i < output.size() && !std::isalpha(static_cast<unsigned char>(output[i]))) ++i;  // to the final letter
    } else {
      piece += output[i];
    }
  }
  return pieces;
}

// The run under script(1) in an 80-column pseudo-terminal (logging.progress: auto draws the bar there): every redraw
// of the bar fits in 79 columns, the interval's loss lines scroll above it (and go to train.log, without the bar),
// a log line clears the bar's row and the bar is drawn again below it, and the final bar comes before `done:`.
TEST_F(TrainRunDir, ProgressBarFitsAnEightyColumnTerminalWithTheLogLinesAboveIt) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) is not installed";
  const auto config = write_config("p");
  const std::string cmd =
      "stty cols 80 rows 24; " + train_cmd(config, "train.max_steps=20 logging.every_steps=5 logging.progress=auto");
  const auto r = run("script -qefc " + shell_quote(cmd) + " /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t bars = 0, last_bar = 0, done = 0;
  std::set<std::string> log_lines;
  const auto pieces = screen_pieces(r.output);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].rfind("[", 0) == 0 && pieces[i].find("% step ") != std::string::npos) {
      ++bars;
      last_bar = i;
      EXPECT_LE(pieces[i].size(), 79u) << pieces[i];
    }
    if (pieces[i].find("] done: 20 steps") != std::string::npos) done = i;
    if (pieces[i].find(" I] step ") != std::string::npos) log_lines.insert(pieces[i].substr(pieces[i].find(" I] ")));
  }
  EXPECT_GE(bars, 4u) << r.output;
  EXPECT_NE(pieces[last_bar].find("100% step 20/20 | loss "), std::string::npos) << pieces[last_bar];
  EXPECT_GT(done, last_bar) << "the final bar is drawn before the done line:\n" << r.output;
  for (const int step : {5, 10, 15, 20}) {
    const std::string line = " I] step " + std::to_string(step) + "/20 | loss ";
    EXPECT_TRUE(std::any_of(log_lines.begin(), log_lines.end(), [&](const auto& l) { return l.rfind(line, 0) == 0; }))
        << "no log line for step " << step << " on the console:\n"
        << r.output;
  }
  // A log line (the checkpoint at step 10) clears the bar's row, and the bar is drawn again below it.
  const auto saved = r.output.find("checkpoint saved: ");
  ASSERT_NE(saved, std::string::npos) << r.output;
  const auto line_end = r.output.find('\n', saved);
  ASSERT_NE(line_end, std::string::npos);
  EXPECT_EQ(r.output.compare(line_end + 1, 1, "["), 0) << r.output.substr(saved, 300);
  EXPECT_NE(r.output.rfind("\r\033[K", saved), std::string::npos);
  const std::string log = read_file(dir_ / "p" / "train.log");
  for (const int step : {5, 10, 15, 20}) {
    EXPECT_NE(log.find("step " + std::to_string(step) + "/20 | loss "), std::string::npos) << log;
  }
  EXPECT_EQ(log.find("[#"), std::string::npos) << "no bar in the log file";
}

}  // namespace
}  // namespace ft::test

// `finetune train` end to end on the CPU under faults: a checkpoint that cannot be written for lack of space, and a
// worker of a two-process run killed; both leave the previous checkpoint intact and resume to the same losses.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_store.h"
#include "train/train_support.h"
#include "util/error.h"

namespace ft::test {
namespace {
namespace fs = std::filesystem;

constexpr int kFailure = static_cast<int>(ExitCode::kFailure);

// The first line of `text` that contains `part`, or "" when none does.
std::string line_with(const std::string& text, const std::string& part) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(part) != std::string::npos) return line;
  }
  return "";
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A live (not zombie) process with this pid exists.
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text) || text.rfind(')') == std::string::npos) return false;
  return text.compare(text.rfind(')'), 3, ") Z") != 0;
}

// The child of `parent` started with RANK=`rank` in its environment, or -1 when there is none (yet).
pid_t worker_pid(pid_t parent, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    if (!std::getline(stat, text) || text.rfind(')') == std::string::npos) continue;
    std::istringstream fields(text.substr(text.rfind(')') + 1));  // " S PPID ..."
    std::string state;
    pid_t ppid = -1;
    if (!(fields >> state >> ppid) || ppid != parent) continue;
    std::ifstream env(entry.path() / "environ");
    for (std::string var; std::getline(env, var, '\0');) {
      if (var == "RANK=" + std::to_string(rank)) return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

class TrainLoopFaults : public TinyRunTest {};

TEST_F(TrainLoopFaults, FullDiskWhileSavingKeepsThePreviousCheckpoint) {
  // A constant schedule, so that a run stopped at step 20 is a prefix of the 40-step reference.
  const std::string constant = "scheduler.type=constant ";
  const auto reference = write_config("reference");
  ASSERT_EQ(run(train_cmd(reference, constant + "train.max_steps=40")).exit_code, 0);

  const auto config = write_config("full");
  const fs::path run_dir = dir_ / "full";
  const fs::path checkpoints = run_dir / "checkpoints";
  const auto first = run(train_cmd(config, constant + "train.max_steps=20"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(entries(checkpoints), (std::vector<std::string>{"step-000010", "step-000020"}));

  // A file size limit too small for a checkpoint's weights but ample for the files the run appends to. With
  // SIGXFSZ ignored, write() fails with EFBIG, as it fails with ENOSPC on a full disk.
  const auto limit = std::min(fs::file_size(checkpoints / "step-000020" / "model" / "model.safetensors"),
                              fs::file_size(checkpoints / "step-000020" / "optimizer.safetensors")) /
                     2;
  for (const char* appended : {"metrics.jsonl", "train.log"}) {
    ASSERT_LT(4 * fs::file_size(run_dir / appended), limit) << appended;
  }
  const auto full = run("trap '' XFSZ; exec prlimit --fsize=" + std::to_string(limit) + " -- " +
                        train_cmd(config, constant + "train.max_steps=40"));
  EXPECT_EQ(full.exit_code, kFailure) << full.output;
  const std::string error = line_with(full.output, "finetune: error: ");
  EXPECT_NE(error.find(checkpoints.string()), std::string::npos) << full.output;
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << full.output;
  EXPECT_NE(error.find("checkpoint of step 30 not saved"), std::string::npos) << full.output;
  EXPECT_NE(error.find(std::strerror(EFBIG)), std::string::npos) << "the OS reason: " << full.output;
  EXPECT_NE(line_with(full.output, "finetune: hint: ").find((checkpoints / "step-000020").string() + " is intact"),
            std::string::npos)
      << full.output;
  EXPECT_EQ(losses(run_dir).rbegin()->first, 30) << "the failed run stops at its first checkpoint";
  EXPECT_NE(read_file(run_dir / "train.log").find("checkpoint of step 30 not saved"), std::string::npos)
      << "train.log ends with the error";
  // No step-000030 and no temporary directory: `resume: auto` finds step-000020, and it verifies.
  EXPECT_EQ(entries(checkpoints), (std::vector<std::string>{"step-000010", "step-000020"}));
  const auto verified = ckpt::CheckpointStore::verify(checkpoints / "step-000020");
  EXPECT_TRUE(verified.ok) << verified.problem;

  // The same in the background: the failure stops the run at the next step, with the same error.
  const auto background = run("trap '' XFSZ; exec prlimit --fsize=" + std::to_string(limit) + " -- " +
                              train_cmd(config, constant + "train.max_steps=40 checkpoint.async=on"));
  EXPECT_EQ(background.exit_code, kFailure) << background.output;
  const std::string background_error = line_with(background.output, "finetune: error: ");
  EXPECT_NE(background_error.find("checkpoint of step 30 not saved"), std::string::npos) << background.output;
  EXPECT_NE(background_error.find(std::strerror(EFBIG)), std::string::npos) << background.output;
  // The failure reaches the training thread at the first step after the write failed, which depends on how soon the
  // writer thread runs (on a loaded machine a few steps later), and at the latest before the final model is written.
  for (const char* written : {"final model written", "final adapter written"}) {
    EXPECT_EQ(background.output.find(written), std::string::npos) << background.output;
  }
  EXPECT_EQ(entries(checkpoints), (std::vector<std::string>{"step-000010", "step-000020"}));

  const auto resumed = run(train_cmd(config, constant + "train.max_steps=40"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + (checkpoints / "step-000020").string()), std::string::npos)
      << resumed.output;
  expect_same_losses(losses(dir_ / "reference"), losses(run_dir), 0.0);
}

TEST_F(TrainLoopFaults, KilledWorkerStopsTheRunAndResumeCompletes) {
  const std::string two = "--nproc-per-node 2 train.max_steps=40 distributed.timeout_s=30";
  const auto reference = write_config("reference");
  const auto uninterrupted = run(train_cmd(reference, two));
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;

  const auto config = write_config("killed");
  const fs::path run_dir = dir_ / "killed";
  const fs::path checkpoints = run_dir / "checkpoints";
  const fs::path output = dir_ / "killed.log";
  BackgroundProcess launcher(train_cmd(config, two), output);
  pid_t rank0 = -1;
  pid_t rank1 = -1;
  ASSERT_TRUE(wait_until(
      [&] {
        rank0 = worker_pid(launcher.pid(), 0);
        rank1 = worker_pid(launcher.pid(), 1);
        return rank0 > 0 && rank1 > 0;
      },
      std::chrono::seconds(60)))
      << read_file(output);
  ASSERT_TRUE(wait_until([&] { return losses(run_dir).count(23) > 0; }, std::chrono::seconds(120)))
      << read_file(output);
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  const int64_t logged_at_kill = losses(run_dir).rbegin()->first;

  // Bounded by the launcher's 10 s grace before SIGKILL and distributed.timeout_s, with room to spare.
  const auto code = launcher.wait(std::chrono::seconds(45));
  const std::string printed = read_file(output);
  ASSERT_TRUE(code.has_value()) << "the launcher still runs 45 s after rank 1 was killed\n" << printed;
  EXPECT_EQ(*code, kFailure) << printed;
  EXPECT_NE(printed.find("rank 1 (pid " + std::to_string(rank1) + ") was killed by signal 9"), std::string::npos)
      << printed;
  EXPECT_FALSE(alive(rank0)) << "rank 0 (pid " << rank0 << ") outlived the launcher";
  EXPECT_FALSE(alive(rank1));
  ASSERT_LT(logged_at_kill, 30) << "killed too late to test the step-20 checkpoint";
  EXPECT_EQ(entries(checkpoints), (std::vector<std::string>{"step-000010", "step-000020"}));
  const auto verified = ckpt::CheckpointStore::verify(checkpoints / "step-000020");
  EXPECT_TRUE(verified.ok) << verified.problem;

  const auto resumed = run(train_cmd(config, two));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + (checkpoints / "step-000020").string()), std::string::npos)
      << resumed.output;
  expect_same_losses(losses(dir_ / "reference"), losses(run_dir), 0.0);
}

// Evaluation's inputs are read and encoded before the first step: a bad eval line under data.on_error: skip is
// passed over as the dataset passes it over (the run finishes and saves its model), and an eval prompt that encodes
// to no token is a configuration error before any step, not an error at the final evaluation with nothing saved.
TEST_F(TrainLoopFaults, EvalInputsAreCheckedBeforeTheFirstStepAndSkippedLikeTheDataset) {
  write_file(dir_ / "eval.jsonl", R"({"prompt": "Reverse: 1 2\nAnswer:", "completion": " 2 1"})"
                                  "\n{broken\n"
                                  R"({"prompt": "Reverse: 3 4\nAnswer:", "completion": " 4 3"})"
                                  "\n");
  const std::string eval = "'data.eval=[{path: " + (dir_ / "eval.jsonl").string() +
                           ", format: prompt_completion}]' eval.exact_match_samples=2 train.max_steps=6 "
                           "checkpoint.every_steps=0";
  const auto skipped = run(train_cmd(write_config("skip"), eval + " data.on_error=skip"));
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_TRUE(fs::exists(dir_ / "skip" / "model" / "model.safetensors")) << skipped.output;
  const auto empty =
      run(train_cmd(write_config("empty"), eval + " data.on_error=skip 'eval.prompts=[\"\"]' tokenizer.add_bos=false"));
  EXPECT_EQ(empty.exit_code, static_cast<int>(ExitCode::kUsage)) << empty.output;
  EXPECT_NE(empty.output.find("eval.prompts[0]: the prompt encodes to no token"), std::string::npos) << empty.output;
  EXPECT_TRUE(losses(dir_ / "empty").empty()) << "no step ran";
}

// A checkpoint whose optimizer state is gone (its file and its manifest entry) would continue with fresh moments,
// another run than the checkpoint's: refused (exit 2), naming the checkpoint.
TEST_F(TrainLoopFaults, ACheckpointWithoutOptimizerStateIsNotResumed) {
  const auto config = write_config("noopt");
  ASSERT_EQ(run(train_cmd(config, "train.max_steps=10")).exit_code, 0);
  const fs::path checkpoint = dir_ / "noopt" / "checkpoints" / "step-000010";
  fs::remove(checkpoint / "optimizer.safetensors");
  auto manifest = nlohmann::json::parse(read_file(checkpoint / "manifest.json"));
  manifest["files"].erase("optimizer.safetensors");
  write_file(checkpoint / "manifest.json", manifest.dump());
  const auto resumed = run(train_cmd(config, "train.max_steps=12"));
  EXPECT_EQ(resumed.exit_code, static_cast<int>(ExitCode::kUsage)) << resumed.output;
  EXPECT_NE(resumed.output.find("step-000010 holds no optimizer state"), std::string::npos) << resumed.output;
}

// A micro-batch the memory limit cannot hold: the error names the batch settings and what to change (on a GPU the
// same message says GPU; verified on the H200, see docs/benchmarks.md).
TEST_F(TrainLoopFaults, OutOfMemoryNamesTheBatchSettingsAndWhatToChange) {
  const auto config = write_config("oom", "checkpoint: {every_steps: 0, keep_last: 1, resume: never}\n");
  // Each activation of 512 x 2048 tokens x 1024 channels is 4 GiB: the step needs several within a 6 GB address
  // space that already holds the libraries (about 3 GB, mostly CUDA's; few malloc arenas keep that stable).
  const auto result = run("MALLOC_ARENA_MAX=2 OMP_NUM_THREADS=2 prlimit --as=6000000000 -- " +
                          train_cmd(config,
                                    "train.micro_batch_size=512 data.seq_len=2048 data.packing=true "
                                    "model.hidden_size=1024 model.intermediate_size=4096 model.num_heads=16 "
                                    "model.num_kv_heads=4 model.max_position_embeddings=2048 "
                                    "train.max_steps=6 scheduler.warmup_steps=1"));
  EXPECT_EQ(result.exit_code, kFailure) << result.output;
  const std::string error = line_with(result.output, "finetune: error: ");
  EXPECT_NE(error.find("out of CPU memory during the training step (train.micro_batch_size=512, "
                       "data.seq_len=2048, train.precision=fp32)"),
            std::string::npos)
      << result.output;
  const std::string hint = line_with(result.output, "finetune: hint: ");
  EXPECT_NE(hint.find("lower train.micro_batch_size"), std::string::npos) << result.output;
  EXPECT_NE(hint.find("optimizer.name=adamw_8bit"), std::string::npos) << result.output;  // a full fine-tune
  EXPECT_FALSE(fs::exists(dir_ / "oom" / "checkpoints")) << "no checkpoint of a step that did not run";
}

}  // namespace
}  // namespace ft::test

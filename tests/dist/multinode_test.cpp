// The multi-node rehearsal on one machine: two "nodes" of 2 CPU ranks each over Gloo on 127.0.0.1, started by the
// built-in launcher (--nnodes 2 --node-rank 0|1 --master-addr --master-port) and by torchrun (the same options,
// --no-python), against one node of 4 ranks: the same losses, checkpoints written once as docs/deploy.md says, a lost
// node noticed by the other within seconds, naming its ranks, and a resume from the last complete checkpoint.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "ckpt/checkpoint_store.h"
#include "nodes_support.h"

namespace ft::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The fixture's setup (tests/dist/CMakeLists.txt): the run every other test compares with.
TEST(MultiNodeReference, OneNodeFourRanks) {
  const fs::path ref = reference_run();
  EXPECT_EQ(losses(ref).size(), 12u);
  EXPECT_TRUE(fs::exists(ref / "model" / "model.safetensors"));
}

// The same losses as one node at every step, bit for bit, and the same final weights.
void expect_same_run_as_one_node(const fs::path& run_dir) {
  const auto expected = losses(reference_run());
  ASSERT_EQ(expected.size(), 12u);
  expect_same_losses(expected, losses(run_dir), 0.0);
  EXPECT_EQ(max_weight_diff(reference_run(), run_dir), 0.0);
}

// Checkpoints at steps 4, 8 and 12 and nothing else, each complete (its manifest's sizes and checksums hold).
void expect_checkpoints(const fs::path& run_dir) {
  const fs::path dir = run_dir / "checkpoints";
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"step-000004", "step-000008", "step-000012"}));
  for (const auto& name : entries(dir)) {
    const auto verified = ckpt::CheckpointStore::verify(dir / name);
    EXPECT_TRUE(verified.ok) << name << ": " << verified.problem;
  }
}

// After a node was lost mid-run: every checkpoint left is complete (an unfinished one is a hidden temporary
// directory at most), and the newest, the one a resume takes, is no newer than the last step logged at the loss.
fs::path expect_last_checkpoint_valid(const fs::path& run_dir, int64_t logged_at_loss) {
  const fs::path dir = run_dir / "checkpoints";
  std::vector<std::string> complete;
  for (const auto& name : entries(dir)) {
    if (name.rfind(".tmp-", 0) == 0) continue;  // a write the loss interrupted: never resumed from
    complete.push_back(name);
    const auto verified = ckpt::CheckpointStore::verify(dir / name);
    EXPECT_TRUE(verified.ok) << name << ": " << verified.problem;
  }
  const auto latest = ckpt::CheckpointStore::find_latest_valid(run_dir);
  if (!latest || complete.empty()) {
    ADD_FAILURE() << "no valid checkpoint in " << dir;
    return {};
  }
  EXPECT_EQ(latest->path.filename().string(), complete.back());
  EXPECT_GE(latest->step, 4);
  EXPECT_LE(latest->step, logged_at_loss);
  return latest->path;
}

// The resumed run continued from `checkpoint` and ended where one node ends, bit for bit: the checkpoint keeps DDP's
// gradient buckets (trainer_state.json's "ddp"), so the first step after the resume sums the four ranks' gradients
// in the order the uninterrupted run did (on DDP's initial buckets the last bits moved).
void expect_resumed_like_one_node(const fs::path& run_dir, const fs::path& checkpoint, const std::string& output) {
  EXPECT_NE(output.find("resumed from " + checkpoint.string()), std::string::npos) << output;
  expect_same_losses(losses(reference_run()), losses(run_dir), 0.0);
  EXPECT_EQ(max_weight_diff(reference_run(), run_dir), 0.0);
}

class MultiNode : public ::testing::Test {
 protected:
  TempDir dir_{"ft-nodes"};
};

TEST_F(MultiNode, BuiltInLauncherTwoNodesTrainAsOneNodeAndRankZeroCheckpointsOnce) {
  write_nodes_config(dir_.path(), "ours");
  const std::string out = run_two_nodes(Launcher::kBuiltIn, dir_.path(), "ours");
  if (HasFailure()) return;
  EXPECT_NE(out.find("launcher: node 0 of 2, 2 workers (ranks 0-1 of 4), store 127.0.0.1:"), std::string::npos) << out;
  EXPECT_NE(out.find("launcher: node 1 of 2, 2 workers (ranks 2-3 of 4), store 127.0.0.1:"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 0] ["), std::string::npos) << "lines prefixed with the global rank\n" << out;
  EXPECT_NE(out.find("distributed: rank 0/4 (local 0/2, node 0), store 127.0.0.1:"), std::string::npos) << out;
  expect_same_run_as_one_node(dir_ / "ours");

  // docs/deploy.md: without ZeRO-1, rank 0 alone writes each checkpoint, with one optimizer file.
  expect_checkpoints(dir_ / "ours");
  EXPECT_EQ(count(out, "checkpoint saved: "), 3) << out;
  for (const int step : {4, 8, 12}) {
    const fs::path checkpoint = dir_ / "ours" / "checkpoints" / step_dir(step);
    EXPECT_EQ(count(out, "[rank 0] checkpoint saved: " + checkpoint.string() + " "), 1) << out;
    EXPECT_TRUE(fs::exists(checkpoint / "optimizer.safetensors")) << checkpoint;
    EXPECT_FALSE(fs::exists(checkpoint / "optimizer.rank0.safetensors")) << checkpoint;
  }
}

TEST_F(MultiNode, TorchrunTwoNodesTrainAsOneNodeAndEveryRankWritesItsZeroShard) {
  write_nodes_config(dir_.path(), "torchrun");
  const std::string out = run_two_nodes(Launcher::kTorchrun, dir_.path(), "torchrun", "distributed.zero=1");
  if (HasFailure()) return;
  // ZeRO-1 trains bit-identically to replicated DDP (tests/train), here across two nodes.
  expect_same_run_as_one_node(dir_ / "torchrun");
  // docs/deploy.md: with distributed.zero: 1 every rank also writes its optimizer shard into the checkpoint.
  expect_checkpoints(dir_ / "torchrun");
  EXPECT_EQ(count(out, "[rank 0] checkpoint saved: "), 3) << "rank 0 publishes each checkpoint once\n" << out;
  for (const int step : {4, 8, 12}) {
    const fs::path checkpoint = dir_ / "torchrun" / "checkpoints" / step_dir(step);
    for (int r = 0; r < 4; ++r) {
      EXPECT_TRUE(fs::exists(checkpoint / ("optimizer.rank" + std::to_string(r) + ".safetensors")))
          << checkpoint << " rank " << r;
    }
    EXPECT_FALSE(fs::exists(checkpoint / "optimizer.safetensors")) << checkpoint;
  }
}

struct LostNode {
  std::string survivor_output;
  int survivor_code = -1;
  double seconds_to_exit = 0;
  int64_t logged_at_loss = 0;
};

// Starts two nodes of `launcher` on a long run of <dir>/<name>.yaml, and once step 5 is logged (the step-4
// checkpoint is complete) SIGKILLs node `victim`: the other node must then exit by itself.
LostNode lose_node(Launcher launcher, const fs::path& dir, const std::string& name, int victim) {
  LostNode out;
  const int port = free_port();
  const fs::path config = dir / (name + ".yaml");
  const fs::path run_dir = dir / name;
  const std::string longer = "train.max_steps=400";
  TwoNodes nodes({node_command(launcher, 0, port, config, longer), node_command(launcher, 1, port, config, longer)},
                 dir, name);
  if (!wait_until([&] { return losses(run_dir).count(5) > 0; }, std::chrono::seconds(150))) {
    ADD_FAILURE() << "step 5 was not logged\n" << nodes.outputs();
    return out;
  }
  // A lost node takes all its processes with it. The built-in launcher's workers die with it; torchrun's run in
  // sessions of their own and would outlive a killed torchrun, so its whole tree goes at once.
  std::vector<pid_t> pids{nodes.node[victim]->pid()};
  if (launcher == Launcher::kTorchrun) {
    for (const pid_t p : descendants(pids[0])) pids.push_back(p);
  }
  for (const pid_t p : pids) ::kill(p, SIGKILL);
  const auto killed_at = Clock::now();
  out.logged_at_loss = losses(run_dir).rbegin()->first;
  const int survivor = 1 - victim;
  const auto code = nodes.node[survivor]->wait(std::chrono::seconds(60));
  out.seconds_to_exit = std::chrono::duration<double>(Clock::now() - killed_at).count();
  out.survivor_output = nodes.output(survivor);
  if (!code)
    ADD_FAILURE() << "node " << survivor << " still runs 60 s after node " << victim << " was lost\n"
                  << out.survivor_output;
  out.survivor_code = code.value_or(-1);
  return out;
}

// Node 0's built-in launcher (the store's host, and rank 0: the checkpoint writer) is SIGKILLed mid-run: node 1's
// launcher sees the store go, stops its workers at once and names node 0's ranks. Every checkpoint left is complete,
// and the newest resumes (under torchrun: the checkpoints do not depend on the launcher).
TEST_F(MultiNode, BuiltInLauncherLostNodeStopsTheOtherNamingItsRanksAndTheLastCheckpointResumes) {
  write_nodes_config(dir_.path(), "ours-lost");
  const LostNode lost = lose_node(Launcher::kBuiltIn, dir_.path(), "ours-lost", /*victim=*/0);
  if (HasFailure()) return;
  EXPECT_EQ(lost.survivor_code, 1) << lost.survivor_output;
  EXPECT_LT(lost.seconds_to_exit, 20.0) << lost.survivor_output;
  EXPECT_NE(lost.survivor_output.find("finetune launcher: lost node 0 (ranks 0-1): the store its launcher hosted at "
                                      "127.0.0.1:"),
            std::string::npos)
      << lost.survivor_output;
  const fs::path checkpoint = expect_last_checkpoint_valid(dir_ / "ours-lost", lost.logged_at_loss);
  if (checkpoint.empty()) return;
  const std::string resumed = run_two_nodes(Launcher::kTorchrun, dir_.path(), "ours-lost");
  if (HasFailure()) return;
  expect_resumed_like_one_node(dir_ / "ours-lost", checkpoint, resumed);
}

// Node 1 (torchrun and its workers) is SIGKILLed mid-run: node 0's ranks fail their next all-reduce, name the lost
// ranks from the store's heartbeats, and torchrun exits non-zero; the newest checkpoint resumes under the built-in
// launcher.
TEST_F(MultiNode, TorchrunLostNodeStopsTheOtherNamingItsRanksAndTheLastCheckpointResumes) {
  write_nodes_config(dir_.path(), "torchrun-lost");
  const LostNode lost = lose_node(Launcher::kTorchrun, dir_.path(), "torchrun-lost", /*victim=*/1);
  if (HasFailure()) return;
  EXPECT_NE(lost.survivor_code, 0) << lost.survivor_output;
  EXPECT_LT(lost.seconds_to_exit, 20.0) << lost.survivor_output;
  EXPECT_NE(lost.survivor_output.find("failed (lost ranks 2, 3)"), std::string::npos) << lost.survivor_output;
  const fs::path checkpoint = expect_last_checkpoint_valid(dir_ / "torchrun-lost", lost.logged_at_loss);
  if (checkpoint.empty()) return;
  const std::string resumed = run_two_nodes(Launcher::kBuiltIn, dir_.path(), "torchrun-lost");
  if (HasFailure()) return;
  expect_resumed_like_one_node(dir_ / "torchrun-lost", checkpoint, resumed);
}

// SIGTERM to node 1's launcher only (Kubernetes deleting one pod, `docker stop` on one node): it forwards the signal
// to its workers, all ranks of both nodes agree to stop after the step, rank 0 writes a checkpoint of that step, and
// both launchers exit 130.
TEST_F(MultiNode, SigtermToOneNodeStopsBothNodesWithACheckpoint) {
  const fs::path config = write_nodes_config(dir_.path(), "term");
  const int port = free_port();
  const std::string longer = "train.max_steps=400";
  TwoNodes nodes({node_command(Launcher::kBuiltIn, 0, port, config, longer),
                  node_command(Launcher::kBuiltIn, 1, port, config, longer)},
                 dir_.path(), "term");
  ASSERT_TRUE(wait_until([&] { return losses(dir_ / "term").count(5) > 0; }, std::chrono::seconds(150)))
      << nodes.outputs();
  ASSERT_EQ(::kill(nodes.node[1]->pid(), SIGTERM), 0);
  for (int n : {0, 1}) {
    const auto code = nodes.node[n]->wait(std::chrono::seconds(60));
    ASSERT_TRUE(code.has_value()) << nodes.outputs();
    EXPECT_EQ(*code, 130) << "node " << n << "\n" << nodes.outputs();
  }
  EXPECT_NE(nodes.output(1).find("stop requested by signal 15"), std::string::npos) << nodes.output(1);
  EXPECT_EQ(nodes.outputs().find("finetune launcher:"), std::string::npos) << "a stop, not a failure\n"
                                                                           << nodes.outputs();
  const int64_t last = losses(dir_ / "term").rbegin()->first;
  const auto latest = ckpt::CheckpointStore::find_latest_valid(dir_ / "term");
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, last) << "the checkpoint of the step the run stopped at";
}

// The launcher's options are checked before anything starts: usage errors, exit code 2, naming the option.
TEST(MultiNodeOptions, BadLauncherOptionsAreUsageErrors) {
  TempDir dir("ft-nodes-usage");
  const fs::path config = write_nodes_config(dir.path(), "usage");
  const struct {
    std::string args, error;
  } cases[] = {
      {"--nnodes 2 --node-rank 1", "--nnodes 2 needs --master-addr"},
      {"--nnodes=2 --node-rank=2 --master-addr=127.0.0.1", "--node-rank 2 is not below --nnodes 2"},
      {"--nnodes 2 --master-addr 127.0.0.1 --master-port 65536", "--master-port '65536' is not a number in 1..65535"},
      {"--nnodes 1:2 --master-addr 127.0.0.1", "--nnodes '1:2' is an elastic range"},
  };
  for (const auto& c : cases) {
    const auto result = run(train_cmd(config, c.args) + " 2>&1");
    EXPECT_EQ(result.exit_code, 2) << c.args << "\n" << result.output;
    EXPECT_NE(result.output.find("finetune: error: " + c.error), std::string::npos) << c.args << "\n" << result.output;
  }
  EXPECT_FALSE(fs::exists(dir / "usage")) << "nothing ran";
}

}  // namespace
}  // namespace ft::test

// Helpers of the multi-node rehearsal (multinode_test.cpp, deploy_test.cpp): two "nodes" of 2 CPU ranks each on
// 127.0.0.1, the tiny run they train, and the 1-node, 4-rank reference run they must equal.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "train/train_support.h"

namespace ft::test {

// The tiny run (tests/train's model and task, the existing dist suites' size) for 4 ranks: 12 steps of 4 x 2 rows,
// a constant learning rate (so a longer run begins like this one), a checkpoint every 4 steps, and a 10 s
// distributed.timeout_s, so that a lost node is noticed fast.
std::string nodes_config(const std::filesystem::path& run_dir);
// Writes nodes_config(dir / name) to dir / (name + ".yaml").
std::filesystem::path write_nodes_config(const std::filesystem::path& dir, const std::string& name);

// The 1-node, 4-rank run (`finetune train --nproc-per-node 4`) of nodes_config: its run directory. CTest runs it once
// (MultiNodeReference.OneNodeFourRanks writes $FT_NODES_REF, see tests/dist/CMakeLists.txt); without the variable
// (the binary run by hand) the first test that needs it runs it.
std::filesystem::path reference_run();

// The torchrun of the .venv (.venv/bin/torchrun), or `python -m torch.distributed.run`.
std::string torchrun();

// The command of one node: the built-in launcher (`finetune train ... --nnodes 2 --node-rank N ...`) or torchrun
// (`torchrun --nnodes 2 --node-rank N --nproc-per-node 2 ... --no-python finetune train ...`), 2 ranks per node.
enum class Launcher { kBuiltIn, kTorchrun };
std::string node_command(Launcher launcher, int node, int port, const std::filesystem::path& config,
                         const std::string& overrides = "");

// Two nodes started in the background (node 1 first), each writing its output to <dir>/<name>.node<N>.log.
struct TwoNodes {
  TwoNodes(const std::vector<std::string>& commands, const std::filesystem::path& dir, const std::string& name);
  // A node still running is SIGKILLed with every process below it (torchrun's workers outlive torchrun).
  ~TwoNodes();
  TwoNodes(const TwoNodes&) = delete;
  TwoNodes& operator=(const TwoNodes&) = delete;
  std::unique_ptr<BackgroundProcess> node[2];
  std::filesystem::path log[2];
  std::string output(int n) const { return read_file(log[n]); }
  std::string outputs() const { return output(0) + output(1); }
};

// Runs the two nodes of `launcher` on <dir>/<name>.yaml to the end (each within `limit`) and returns their output
// (node 0's, then node 1's); fails the test when one does not exit 0.
std::string run_two_nodes(Launcher launcher, const std::filesystem::path& dir, const std::string& name,
                          const std::string& overrides = "", std::chrono::seconds limit = std::chrono::seconds(150));

// Every process below `pid` (children, grandchildren, ...), from /proc.
std::vector<pid_t> descendants(pid_t pid);

// The directory names under `dir`, sorted.
std::vector<std::string> entries(const std::filesystem::path& dir);

// "step-000004".
std::string step_dir(int64_t step);

// How often `needle` occurs in `text`.
int count(const std::string& text, const std::string& needle);

}  // namespace ft::test

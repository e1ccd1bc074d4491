#include "nodes_support.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace ft::test {

namespace fs = std::filesystem;

std::string nodes_config(const fs::path& run_dir) {
  return "run: {output_dir: " + run_dir.string() +
         ", seed: 5, device: cpu, deterministic: true}\n"
         "data:\n"
         "  synth: {task: reverse, train_samples: 4000, seed: 2}\n"
         "  train: [{format: prompt_completion}]\n"
         "  seq_len: 32\n"
         "  cache_dir: " +
         (run_dir.parent_path() / (run_dir.filename().string() + "-cache")).string() +
         "\n"
         "tokenizer: {train_vocab_size: 300}\n"
         "model: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_heads: 4, num_kv_heads: 2,\n"
         "        max_position_embeddings: 64}\n"
         "train: {max_steps: 12, micro_batch_size: 2, grad_clip: 1.0}\n"
         "optimizer: {lr: 2.0e-3, weight_decay: 0.1}\n"
         "scheduler: {type: constant}\n"
         "checkpoint: {every_steps: 4, keep_last: 3}\n"
         "logging: {every_steps: 1, progress: off}\n"
         "distributed: {timeout_s: 10}\n";
}

fs::path write_nodes_config(const fs::path& dir, const std::string& name) {
  const fs::path path = dir / (name + ".yaml");
  write_file(path, nodes_config(dir / name));
  return path;
}

fs::path reference_run() {
  static const fs::path dir = [] {
    static TempDir own("ft-nodes-ref");
    const char* shared = std::getenv("FT_NODES_REF");
    const fs::path run_dir = shared != nullptr && *shared != '\0' ? fs::path(shared) : own / "ref";
    if (shared != nullptr && *shared != '\0' && std::getenv("FT_NODES_REF_WRITE") == nullptr) return run_dir;
    std::error_code ec;
    fs::remove_all(run_dir, ec);
    fs::remove_all(run_dir.string() + "-cache", ec);
    ::setenv("OMP_NUM_THREADS", "1", 1);  // as every run compared with it
    const fs::path config = run_dir.string() + ".yaml";
    write_file(config, nodes_config(run_dir));
    const auto result = run(train_cmd(config, "--nproc-per-node 4") + " 2>&1");
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return run_dir;
  }();
  return dir;
}

std::string torchrun() {
  const fs::path py = python();
  if (py.has_parent_path() && fs::exists(py.parent_path() / "torchrun")) {
    return shell_quote((py.parent_path() / "torchrun").string());
  }
  return shell_quote(python()) + " -m torch.distributed.run";
}

std::string node_command(Launcher launcher, int node, int port, const fs::path& config, const std::string& overrides) {
  const std::string where = "--nnodes 2 --node-rank " + std::to_string(node) +
                            " --master-addr 127.0.0.1 --master-port " + std::to_string(port);
  if (launcher == Launcher::kBuiltIn) return train_cmd(config, "--nproc-per-node 2 " + where + " " + overrides);
  return torchrun() + " " + where + " --nproc-per-node 2 --no-python " + train_cmd(config, overrides);
}

TwoNodes::TwoNodes(const std::vector<std::string>& commands, const fs::path& dir, const std::string& name) {
  ::setenv("OMP_NUM_THREADS", "1", 1);  // four ranks on a shared 2-core host, and the reference's threads
  for (int n : {1, 0}) {
    log[n] = dir / (name + ".node" + std::to_string(n) + ".log");
    node[n] = std::make_unique<BackgroundProcess>(commands.at(static_cast<size_t>(n)), log[n]);
  }
}

TwoNodes::~TwoNodes() {
  for (auto& n : node) {
    if (!n || n->wait(std::chrono::seconds(0))) continue;
    for (const pid_t p : descendants(n->pid())) ::kill(p, SIGKILL);
  }
}

std::string run_two_nodes(Launcher launcher, const fs::path& dir, const std::string& name, const std::string& overrides,
                          std::chrono::seconds limit) {
  const int port = free_port();
  const fs::path config = dir / (name + ".yaml");
  TwoNodes nodes(
      {node_command(launcher, 0, port, config, overrides), node_command(launcher, 1, port, config, overrides)}, dir,
      name);
  for (int n : {0, 1}) {
    const auto code = nodes.node[n]->wait(limit);
    if (!code) {
      ADD_FAILURE() << "node " << n << " still runs after " << limit.count() << " s\n" << nodes.outputs();
    } else if (*code != 0) {
      ADD_FAILURE() << "node " << n << " exited with " << *code << "\n" << nodes.outputs();
    }
  }
  return nodes.outputs();
}

std::vector<pid_t> descendants(pid_t pid) {
  std::multimap<pid_t, pid_t> children;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t parent = 0;
    rest >> state >> parent;
    children.emplace(parent, static_cast<pid_t>(std::stoi(name)));
  }
  std::vector<pid_t> out;
  std::vector<pid_t> todo{pid};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string step_dir(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%06lld", static_cast<long long>(step));
  return name;
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace ft::test

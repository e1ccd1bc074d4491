#include "train/train_support.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include <yaml-cpp/yaml.h>

#include "io/safetensors.h"

namespace ft::test {
namespace {

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// `extra`'s sections over `base`'s: a section both name is merged key by key, extra's values winning (a config
// file may not say a key twice).
std::string merged_yaml(const std::string& base, const std::string& extra) {
  YAML::Node out = YAML::Load(base);
  const YAML::Node add = YAML::Load(extra);
  if (add.IsMap()) {
    for (const auto& section : add) {
      const std::string name = section.first.as<std::string>();
      YAML::Node into = out[name];
      if (into.IsDefined() && into.IsMap() && section.second.IsMap()) {
        for (const auto& entry : section.second) into[entry.first.as<std::string>()] = entry.second;
      } else {
        out[name] = section.second;
      }
    }
  }
  YAML::Emitter emitted;
  emitted << out;
  return std::string(emitted.c_str()) + "\n";
}

}  // namespace

std::string tiny_config(const std::filesystem::path& run_dir) {
  return "run: {output_dir: " + run_dir.string() +
         ", seed: 5, device: cpu, deterministic: true}\n"
         "data:\n"
         "  synth: {task: reverse, train_samples: 4000, seed: 2}\n"
         "  train: [{format: prompt_completion}]\n"
         "  seq_len: 32\n"
         "  cache_dir: " +
         (run_dir.parent_path() / "cache").string() +
         "\n"
         "tokenizer: {train_vocab_size: 300}\n"
         "model: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_heads: 4, num_kv_heads: 2,\n"
         "        max_position_embeddings: 64}\n"
         "train: {max_steps: 60, micro_batch_size: 8, grad_clip: 1.0}\n"
         "optimizer: {lr: 2.0e-3, weight_decay: 0.1}\n"
         "scheduler: {type: cosine, warmup_steps: 5, min_lr_ratio: 0.1}\n"
         "checkpoint: {every_steps: 10, keep_last: 3}\n"
         "logging: {every_steps: 1, progress: off}\n";
}

std::map<int64_t, double> losses(const std::filesystem::path& run_dir) {
  std::map<int64_t, double> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    // A run still writing may leave its last line incomplete: that line is read on a later call.
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    if (j.at("event") == "train") out[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  return out;
}

std::string train_cmd(const std::filesystem::path& config, const std::string& overrides) {
  return shell_quote(binary()) + " train --config " + shell_quote(config.string()) + " " + overrides;
}

void expect_same_losses(const std::map<int64_t, double>& expected, const std::map<int64_t, double>& actual,
                        double rel_tol) {
  ASSERT_EQ(expected.size(), actual.size());
  for (const auto& [step, loss] : expected) {
    ASSERT_TRUE(actual.count(step)) << "step " << step;
    if (rel_tol == 0.0) {
      EXPECT_EQ(loss, actual.at(step)) << "step " << step;
    } else {
      EXPECT_NEAR(loss, actual.at(step), rel_tol * std::abs(loss)) << "step " << step;
    }
  }
}

double max_weight_diff(const std::filesystem::path& run_a, const std::filesystem::path& run_b) {
  const auto wa = io::read_safetensors(run_a / "model" / "model.safetensors");
  const auto wb = io::read_safetensors(run_b / "model" / "model.safetensors");
  EXPECT_EQ(wa.size(), wb.size());
  double worst = 0.0;
  for (const auto& [name, t] : wa) worst = std::max(worst, (t - wb.at(name)).abs().max().item<double>());
  return worst;
}

bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

BackgroundProcess::BackgroundProcess(const std::string& command, const std::filesystem::path& output) {
  const std::string script = "exec " + command + " >" + shell_quote(output.string()) + " 2>&1";
  pid_ = fork();
  if (pid_ == 0) {
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid_ < 0) throw std::runtime_error("fork failed for: " + command);
}

BackgroundProcess::~BackgroundProcess() {
  if (exit_code_) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

std::optional<int> BackgroundProcess::wait(std::chrono::seconds limit) {
  wait_until(
      [&] {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) exit_code_ = exit_code_of(status);
        return exit_code_.has_value();
      },
      limit);
  return exit_code_;
}

int run_and_signal(const std::string& command, const std::filesystem::path& run_dir, int64_t step, int sig) {
  BackgroundProcess process(command, "/dev/null");
  if (wait_until([&] { return losses(run_dir).count(step) > 0; }, std::chrono::seconds(120))) {
    kill(process.pid(), sig);
  }
  return process.wait(std::chrono::seconds(600)).value_or(-1);
}

std::filesystem::path TinyRunTest::write_config(const std::string& name, const std::string& extra) {
  const auto path = dir_ / (name + ".yaml");
  write_file(path, merged_yaml(tiny_config(dir_ / name), extra));
  return path;
}

}  // namespace ft::test

// Helpers of the `finetune train` end-to-end suites: the tiny run, its logged losses, and runs in the background.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "support/test_support.h"

namespace ft::test {

// A tiny model trained from scratch on a synthetic task, with its tokenizer trained at start.
std::string tiny_config(const std::filesystem::path& run_dir);

// step -> loss of the "train" events; a step logged twice (replayed after a resume) keeps its last value.
std::map<int64_t, double> losses(const std::filesystem::path& run_dir);

std::string train_cmd(const std::filesystem::path& config, const std::string& overrides = "");

void expect_same_losses(const std::map<int64_t, double>& expected, const std::map<int64_t, double>& actual,
                        double rel_tol);

// Largest |a - b| over the tensors of two runs' saved models (<run>/model/model.safetensors, the same names in both).
double max_weight_diff(const std::filesystem::path& run_a, const std::filesystem::path& run_b);

// Polls `done` every 5 ms; false when it is still false after `limit`.
bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit);

// `command` run through /bin/sh in the background, stdout and stderr to `output`; SIGKILLed and reaped on
// destruction if it still runs.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::string& command, const std::filesystem::path& output);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The exit code (128 + signal when killed), or nullopt when it still runs after `limit`.
  std::optional<int> wait(std::chrono::seconds limit);

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// Starts `command` in the background and sends `sig` once the run has logged `step`; returns the exit code.
int run_and_signal(const std::string& command, const std::filesystem::path& run_dir, int64_t step, int sig);

// A temporary directory for the runs of one test, and their configs.
class TinyRunTest : public ::testing::Test {
 protected:
  // Writes <dir>/<name>.yaml: the tiny config running in <dir>/<name>, followed by `extra`.
  std::filesystem::path write_config(const std::string& name, const std::string& extra = "");

  TempDir dir_{"ft-loop"};
};

}  // namespace ft::test

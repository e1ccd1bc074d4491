// Running a sweep: every trial an ordinary `finetune train` child process in <sweep dir>/<trial name>/ with its
// resolved config, on disjoint GPU sets (CUDA_VISIBLE_DEVICES per child) or sequentially / max_parallel at once on
// the CPU; finished trials are skipped, interrupted ones resume from their newest checkpoint, failed ones rerun
// only when asked. SIGINT/SIGTERM are forwarded (the children checkpoint and stop), a second signal kills them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sweep/plan.h"

namespace ft::sweep {

struct RunOptions {
  bool retry_failed = false;                  // rerun trials that failed before
  std::optional<int> index;                   // run this trial alone (Slurm arrays, Kubernetes Indexed Jobs)
  std::string log_level;                      // --log-level for the children; empty = their config's
  std::string executable = "/proc/self/exe";  // the finetune binary the children run
};

// Runs the trials of `plan` that are not done and, unless options.index is set, writes the summary. Returns the
// exit code: 0 when every trial run is finished (or stopped early by median stopping), 130 after SIGINT/SIGTERM,
// 1 when a trial failed or was left unfinished (another process runs it).
int run_sweep(const Plan& plan, const RunOptions& options);

// The device sets of concurrent trials: `gpus` (CUDA_VISIBLE_DEVICES entries) cut into disjoint sets of
// `per_trial`, at most `max_parallel` of them (0 = as many as fit). Throws ft::ConfigError when one set does not fit.
std::vector<std::vector<std::string>> device_slots(const std::vector<std::string>& gpus, int64_t per_trial,
                                                   int64_t max_parallel);

// The entries of a CUDA_VISIBLE_DEVICES value ("0,2", "GPU-uuid,..."), or 0..count-1 when `text` is empty or does not
// name `count` devices.
std::vector<std::string> visible_device_ids(const std::string& text, int count);

// The median of `values` (the mean of the two middle ones for an even count); nullopt when empty.
std::optional<double> median(std::vector<double> values);

}  // namespace ft::sweep

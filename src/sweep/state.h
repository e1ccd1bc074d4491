// The state of one trial, in <trial dir>/trial.json, written by the process that runs it while it holds the
// trial's lock (<trial dir>/.lock, flock), so that a rerun, another array task and `--status` agree on it.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "util/file_writer.h"

namespace ft::sweep {

enum class Status {
  kPending,      // not started
  kRunning,      // a process holds the trial's lock and runs it
  kFinished,     // `finetune train` exited 0
  kFailed,       // it exited non-zero (not by our stop) or could not start
  kInterrupted,  // stopped by a signal or killed: resumed from its newest checkpoint by the next run
  kPruned,       // stopped early by median stopping
};

const char* to_string(Status s);
std::optional<Status> parse_status(const std::string& s);
// Finished and pruned trials are done: a rerun skips them.
inline bool done(Status s) {
  return s == Status::kFinished || s == Status::kPruned;
}

struct TrialState {
  Status status = Status::kPending;
  int attempts = 0;      // times a `finetune train` was started for it
  int exit_code = 0;     // of the last attempt (128 + signal when killed)
  std::string error;     // failed: the last error line of its output; pruned: why
  double wall_s = 0.0;   // wall time of the finished attempts together
  double started = 0.0;  // unix time the current (or last) attempt started
  std::string host;      // where it runs or ran
  int pid = 0;           // the `finetune train` process of the current attempt
};

// <trial dir>/trial.json, or a pending state when there is none (or it cannot be parsed).
TrialState read_state(const std::filesystem::path& trial_dir);
// Writes <trial dir>/trial.json atomically.
void write_state(const std::filesystem::path& trial_dir, const TrialState& state);

// The trial directory's lock (trial_dir/.lock), held by the process running the trial; nullopt when another process
// holds it. Creates the directory.
std::optional<FileLock> try_lock_trial(const std::filesystem::path& trial_dir);

// True when some process holds the trial's lock now.
bool locked_elsewhere(const std::filesystem::path& trial_dir);

// The status as another process sees it: "running" whose lock nobody holds was interrupted (killed).
Status observed_status(const std::filesystem::path& trial_dir, const TrialState& state);

// Unix time now, in seconds.
double unix_now();

}  // namespace ft::sweep

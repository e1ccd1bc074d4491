// The rule for a run directory that already holds a run: a run that would start at step 0 there (checkpoint.resume
// never, or auto with no checkpoint to continue) is refused, unless run.overwrite (`finetune train --overwrite`)
// deletes the earlier run's files first. So a rerun never mixes two runs' metrics, checkpoints and final model.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "util/file_writer.h"

namespace ft::train {

// What shows that a run trained in `run_dir` ("metrics.jsonl", "checkpoints/step-000600", "model/", "adapter/"):
// empty when nothing did. An empty metrics.jsonl (opened by a run that stopped before its first log) does not count.
std::vector<std::string> earlier_run(const std::filesystem::path& run_dir);

// Throws the ConfigError (exit code 2) that refuses to start a new run over `earlier` (from earlier_run), with
// `why` saying why this run would start at step 0, and the ways on.
[[noreturn]] void refuse_new_run(const std::filesystem::path& run_dir, const std::vector<std::string>& earlier,
                                 const std::string& why);

// run.overwrite: the earlier run's files (what runs write into the run directory: config.yaml and its history,
// train.log, metrics.jsonl, checkpoints, the final model or adapter, TensorBoard files, profiler traces, and the
// generated data and trained tokenizer that the config's derived paths name inside it; other files stay) are moved
// into <run_dir>/.overwritten/ and deleted only once the new run has trained its first step (commit()). A run that
// fails or is stopped before that (unreadable data, a missing model file, out of memory, Ctrl-C while loading) puts
// them back when this object is destroyed, so a bad config never costs the earlier run; restore_left_behind() does
// the same for a process killed in between. Rank 0 only, with the run directory locked (RunDirLock).
class EarlierRunSetAside {
 public:
  EarlierRunSetAside() = default;
  // Moves `cfg`'s earlier run aside. Refuses (ConfigError, nothing moved) when one of those files holds an input the
  // config reads (a data file under checkpoints/, a base model in model/).
  static EarlierRunSetAside take(const Config& cfg);
  // Puts back what a killed process left in <run_dir>/.overwritten/. Returns what came back.
  static std::vector<std::string> restore_left_behind(const std::filesystem::path& run_dir);

  EarlierRunSetAside(EarlierRunSetAside&& other) noexcept;
  EarlierRunSetAside& operator=(EarlierRunSetAside&& other) noexcept;
  EarlierRunSetAside(const EarlierRunSetAside&) = delete;
  EarlierRunSetAside& operator=(const EarlierRunSetAside&) = delete;
  ~EarlierRunSetAside();  // not committed: the earlier run's files return, this run's at their paths are deleted

  const std::vector<std::string>& names() const { return names_; }  // relative to the run directory
  void commit();  // the new run has started: deletes the earlier run's files for good

 private:
  void restore() noexcept;
  std::filesystem::path run_dir_;
  std::vector<std::string> names_;
};

// An exclusive lock (flock) on <run_dir>/.train.lock while the object lives, taken by the process that writes the
// run directory (rank 0) before it reads or deletes anything there: a second `finetune train` into the same directory
// is refused (ConfigError) instead of deleting the first one's temporary checkpoints and interleaving their metrics.
// The kernel drops the lock when the process dies, so a killed run leaves none behind. Default-constructed: no lock
// (the other ranks).
class RunDirLock {
 public:
  RunDirLock() = default;
  explicit RunDirLock(const std::filesystem::path& run_dir);

 private:
  std::optional<FileLock> lock_;
};

}  // namespace ft::train

#include "train/run_dir.h"

#include <fstream>
#include <utility>

#include "ckpt/checkpoint_store.h"
#include "config/derived_paths.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"
#include "util/fs.h"
#include "util/log.h"

namespace ft::train {
namespace fs = std::filesystem;

namespace {

bool non_empty_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && fs::file_size(path, ec) > 0 && !ec;
}

// `path` lies inside `dir` (both absolute and normalised).
bool inside(const fs::path& path, const fs::path& dir) {
  const auto rel = path.lexically_normal().lexically_relative(dir.lexically_normal());
  return !rel.empty() && *rel.begin() != ".." && *rel.begin() != ".";
}

// What the config reads, by key: run.overwrite must not delete any of it (a base model copied into the run's
// model/, a data file under checkpoints/, a checkpoint to resume from).
std::vector<std::pair<std::string, std::string>> config_inputs(const Config& cfg) {
  std::vector<std::pair<std::string, std::string>> inputs{
      {"model.path", cfg.model.path}, {"tokenizer.path", cfg.tokenizer.path}, {"data.cache_dir", cfg.data.cache_dir}};
  for (size_t i = 0; i < cfg.data.train.size(); ++i) {
    inputs.emplace_back(fmt::format("data.train[{}].path", i), cfg.data.train[i].path);
  }
  for (size_t i = 0; i < cfg.data.eval.size(); ++i) {
    inputs.emplace_back(fmt::format("data.eval[{}].path", i), cfg.data.eval[i].path);
  }
  if (cfg.checkpoint.resume.mode == ResumeSetting::Mode::kPath) {
    inputs.emplace_back("checkpoint.resume", cfg.checkpoint.resume.path);
  }
  return inputs;
}

void refuse_to_delete_inputs(const Config& cfg, const fs::path& run_dir, const std::vector<fs::path>& targets) {
  for (const auto& [key, value] : config_inputs(cfg)) {
    if (value.empty()) continue;
    const fs::path input = fs::absolute(value).lexically_normal();
    for (const auto& target : targets) {
      const fs::path doomed = fs::absolute(target).lexically_normal();
      if (input == doomed || inside(input, doomed)) {
        throw ConfigError(fmt::format("run.overwrite would delete {}, which holds {} ({})",
                                      doomed.lexically_relative(run_dir).string(), key, value),
                          "move it out of run.output_dir (or choose another run.output_dir); nothing was deleted");
      }
    }
  }
}

}  // namespace

std::vector<std::string> earlier_run(const fs::path& run_dir) {
  std::vector<std::string> found;
  if (non_empty_file(run_dir / "metrics.jsonl")) found.emplace_back("metrics.jsonl");
  const auto checkpoints = ckpt::CheckpointStore::list(run_dir);
  if (!checkpoints.empty()) {
    found.push_back((fs::path("checkpoints") / checkpoints.back().path.filename()).string());
  }
  std::error_code ec;
  for (const char* final_dir : {"model", "adapter"}) {
    if (fs::is_directory(run_dir / final_dir, ec)) found.push_back(std::string(final_dir) + "/");
  }
  return found;
}

void refuse_new_run(const fs::path& run_dir, const std::vector<std::string>& earlier, const std::string& why) {
  throw ConfigError(fmt::format("run.output_dir {} already holds a run ({}), and this one would start at step 0: {}",
                                run_dir.string(), fmt::join(earlier, ", "), why),
                    "add --overwrite (run.overwrite=true) to delete that run and start again, choose another "
                    "run.output_dir, or keep checkpoint.resume=auto to continue it from its newest checkpoint");
}

namespace {

// Inside the run directory, so the moves are renames on one file system.
constexpr const char* kAsideDir = ".overwritten";
// What commit() renames the folder to before deleting it: a deletion cut short leaves a folder nothing restores
// (restoring from a half-deleted .overwritten/ would replace the live run's files with the remains).
constexpr const char* kDeletingDir = ".overwritten.deleting";
// The names set aside, one per line relative to the run directory, written before the first move.
constexpr const char* kManifest = "MANIFEST";

// The earlier run's files that run.overwrite replaces, present or not.
std::vector<fs::path> earlier_run_files(const Config& cfg, const fs::path& run_dir) {
  std::vector<fs::path> targets;
  for (const char* name : {"config.yaml", "config_history", "train.log", "metrics.jsonl", "checkpoints", "model",
                           "adapter", "model.tmp", "adapter.tmp", "tb", "profile"}) {
    targets.push_back(run_dir / name);
  }
  // The files a run generates at its start (synthetic data, a trained tokenizer) follow the config, which may have
  // changed: they are made again. Only those inside the run directory; a path the config names stays.
  Config derived = cfg;
  config::fill_derived_paths(derived);
  auto add_generated = [&](const std::string& before, const std::string& after) {
    if (before.empty() && !after.empty() && inside(fs::absolute(after), run_dir)) targets.emplace_back(after);
  };
  for (size_t i = 0; i < derived.data.train.size(); ++i)
    add_generated(cfg.data.train[i].path, derived.data.train[i].path);
  for (size_t i = 0; i < derived.data.eval.size(); ++i) add_generated(cfg.data.eval[i].path, derived.data.eval[i].path);
  if (cfg.tokenizer.train_vocab_size > 0) add_generated(cfg.tokenizer.path, derived.tokenizer.path);
  return targets;
}

bool present(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

void move_to(const fs::path& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  fs::rename(from, to);
}

// Moves what <run_dir>/.overwritten/ holds back to its place (replacing what a later run wrote there), then deletes
// the folder. A name of the manifest that is not in the folder was not moved yet; without a manifest (a commit
// that could not delete the folder removed it) nothing goes back.
std::vector<std::string> put_back(const fs::path& run_dir) {
  const fs::path aside = run_dir / kAsideDir;
  std::vector<std::string> restored;
  std::ifstream manifest(aside / kManifest);
  for (std::string name; std::getline(manifest, name);) {
    if (name.empty() || !present(aside / name)) continue;
    remove_tree(run_dir / name);
    move_to(aside / name, run_dir / name);
    restored.push_back(name);
  }
  manifest.close();
  remove_tree(aside);
  return restored;
}

}  // namespace

EarlierRunSetAside EarlierRunSetAside::take(const Config& cfg) {
  const fs::path run_dir = fs::absolute(cfg.run.output_dir).lexically_normal();
  const auto targets = earlier_run_files(cfg, run_dir);
  refuse_to_delete_inputs(cfg, run_dir, targets);
  std::vector<std::string> names;
  for (const auto& target : targets) {
    if (present(target)) names.push_back(target.lexically_relative(run_dir).string());
  }
  EarlierRunSetAside aside;
  if (names.empty()) return aside;
  const fs::path dir = run_dir / kAsideDir;
  remove_tree(dir);  // restore_left_behind emptied it; a folder left now holds nothing of a run
  fs::create_directories(dir);
  write_file(dir / kManifest, fmt::format("{}\n", fmt::join(names, "\n")), /*sync=*/true);
  aside.run_dir_ = run_dir;  // from here on the destructor puts back whatever was moved
  for (const auto& name : names) {
    if (!present(run_dir / name)) continue;  // inside a folder moved before it
    try {
      move_to(run_dir / name, dir / name);
    } catch (const fs::filesystem_error& e) {
      throw Error(fmt::format("run.overwrite: cannot move {} aside: {}", (run_dir / name).string(), e.what()),
                  "check the run directory's permissions, or choose another run.output_dir");
    }
    aside.names_.push_back(name);
  }
  return aside;
}

std::vector<std::string> EarlierRunSetAside::restore_left_behind(const fs::path& run_dir) {
  if (present(run_dir / kDeletingDir)) {
    try {
      remove_tree(run_dir / kDeletingDir);
    } catch (const Error& e) {
      FT_LOG_WARN("cannot delete {}, left by an earlier run.overwrite: {}", (run_dir / kDeletingDir).string(),
                  e.what());
    }
  }
  if (!present(run_dir / kAsideDir)) return {};
  try {
    return put_back(run_dir);
  } catch (const std::exception& e) {  // fs::filesystem_error from a rename, ft::Error from remove_tree
    throw Error(fmt::format("cannot put back the earlier run's files that a killed run.overwrite left in {}: {}",
                            (run_dir / kAsideDir).string(), e.what()),
                "move them back into the run directory by hand (or delete the folder to drop that run)");
  }
}

EarlierRunSetAside::EarlierRunSetAside(EarlierRunSetAside&& other) noexcept
    : run_dir_(std::exchange(other.run_dir_, {})), names_(std::move(other.names_)) {}

EarlierRunSetAside& EarlierRunSetAside::operator=(EarlierRunSetAside&& other) noexcept {
  if (this != &other) {
    restore();
    run_dir_ = std::exchange(other.run_dir_, {});
    names_ = std::move(other.names_);
  }
  return *this;
}

EarlierRunSetAside::~EarlierRunSetAside() {
  restore();
}

void EarlierRunSetAside::commit() {
  if (run_dir_.empty()) return;
  const fs::path run_dir = std::exchange(run_dir_, {});
  try {
    remove_tree_via(run_dir / kAsideDir, run_dir / kDeletingDir);
  } catch (const std::exception& e) {  // fs::filesystem_error from the rename, ft::Error from remove_tree
    // Without its manifest a folder left behind is deleted at the next start, never put back over this run.
    std::error_code ec;
    fs::remove(run_dir / kAsideDir / kManifest, ec);
    FT_LOG_WARN("run.overwrite: cannot delete the earlier run's files ({}); delete {} and {} by hand", e.what(),
                (run_dir / kAsideDir).string(), (run_dir / kDeletingDir).string());
    return;
  }
  FT_LOG_INFO("run.overwrite: deleted the earlier run's {}", fmt::join(names_, ", "));
}

namespace {

// The earlier run's train.log written into this attempt's, ahead of its lines, rather than renamed over it: the log's
// file sink keeps appending there, so what stopped this attempt (main's final error too) is on disk after them.
// Whether it did; on a failure put_back renames the earlier log back over this attempt's as it is.
bool merge_earlier_log(const fs::path& run_dir) {
  const fs::path log_file = run_dir / "train.log", earlier_log = run_dir / kAsideDir / "train.log";
  if (!present(log_file) || !present(earlier_log)) return false;
  try {
    const std::string earlier = read_text_file(earlier_log), attempt = read_text_file(log_file);
    std::ofstream out(log_file, std::ios::trunc);  // not write_file: it would put a new file in place
    out << earlier << attempt;
    out.close();
    if (!out) throw Error("cannot write " + log_file.string());
    fs::remove(earlier_log);
    return true;
  } catch (const std::exception& e) {
    FT_LOG_WARN("run.overwrite: the earlier run's train.log goes back in place of this run's ({})", e.what());
    return false;
  }
}

}  // namespace

void EarlierRunSetAside::restore() noexcept {
  if (run_dir_.empty()) return;
  const fs::path run_dir = std::exchange(run_dir_, {});
  try {
    const bool merged_log = merge_earlier_log(run_dir);
    std::vector<std::string> restored = put_back(run_dir);
    if (merged_log) restored.push_back("train.log");
    if (restored.empty()) return;
    FT_LOG_WARN("run.overwrite: this run stopped before it started training; the earlier run's {} are back in place",
                fmt::join(restored, ", "));
  } catch (const std::exception& e) {
    FT_LOG_ERROR("run.overwrite: cannot put the earlier run's files back ({}); they are in {}", e.what(),
                 (run_dir / kAsideDir).string());
  }
}

RunDirLock::RunDirLock(const fs::path& run_dir) {
  fs::create_directories(run_dir);
  // Not <run_dir>/.lock: a sweep holds that one for the trial it runs there (sweep/state.h).
  const fs::path file = run_dir / ".train.lock";
  try {
    lock_ = FileLock::try_lock(file);
  } catch (const Error& e) {  // a file system without flock (Lustre without -o flock, NFS without lockd)
    FT_LOG_WARN("the run directory is not locked ({}): a second train into it would not be refused", e.what());
    return;
  }
  if (!lock_) {
    throw ConfigError(fmt::format("run.output_dir {} is in use by another finetune train (it holds {})",
                                  run_dir.string(), file.string()),
                      "wait for that run to end (or stop it), or choose another run.output_dir");
  }
}

}  // namespace ft::train

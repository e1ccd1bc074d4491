// Atomic checkpoint directories: <run_dir>/checkpoints/step-000123. The caller fills a temporary directory
// (begin()), commit() writes manifest.json (SHA-256 and size of every file), fsyncs files and directories and
// renames it into place, so a crash or kill -9 at any moment leaves every earlier checkpoint intact. Older
// checkpoints are pruned only after a successful commit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/checksum.h"

namespace ft::ckpt {

struct CheckpointInfo {
  std::filesystem::path path;  // <run_dir>/checkpoints/step-000123
  int64_t step = 0;
  std::optional<double> metric;  // from the manifest (e.g. eval loss), if any
};

struct VerifyResult {
  bool ok = false;
  std::string problem;  // empty when ok: "missing manifest.json", "model.safetensors: size 10 != 12", ...
};

struct CheckpointStoreOptions {
  int64_t keep_last = 2;   // committed checkpoints kept (newest first); 0 = keep all
  bool keep_best = false;  // also keep the one with the lowest metric
};

class CheckpointStore {
 public:
  static constexpr const char* kManifest = "manifest.json";

  CheckpointStore(std::filesystem::path run_dir, CheckpointStoreOptions opts);
  // Removes an uncommitted temporary directory (e.g. on an exception while the caller was writing).
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  // Starts checkpoint `step`: returns an empty temporary directory under <run_dir>/checkpoints/ for the caller
  // to fill (any layout, subdirectories allowed). Removes stale temporary directories of earlier crashes.
  std::filesystem::path begin(int64_t step);
  // Writes the manifest (with `metric` and `extra` as "metric" and "extra"), fsyncs, renames into
  // step-<step>, fsyncs the parent and prunes. Returns the final path. On any error (e.g. ENOSPC) throws
  // ft::Error, removes the temporary directory and leaves earlier checkpoints untouched. `written` holds digests
  // the writers computed (FileWriter::finish), by path in the temporary directory; other files are read and hashed.
  std::filesystem::path commit(std::optional<double> metric = std::nullopt, const nlohmann::json& extra = {},
                               const FileDigests& written = {});
  // Drops the temporary directory without committing (no-op when none is pending).
  void abort() noexcept;

  const std::filesystem::path& dir() const { return dir_; }  // <run_dir>/checkpoints

  // Committed checkpoints (those with a manifest), sorted by step; not verified.
  static std::vector<CheckpointInfo> list(const std::filesystem::path& run_dir);
  // Recomputes sizes and checksums against the manifest.
  static VerifyResult verify(const std::filesystem::path& checkpoint_dir);
  // The newest checkpoint that verifies; corrupt ones are skipped with a warning. nullopt when none.
  static std::optional<CheckpointInfo> find_latest_valid(const std::filesystem::path& run_dir);

 private:
  void prune(int64_t newest_step);

  std::filesystem::path dir_;
  CheckpointStoreOptions opts_;
  std::filesystem::path pending_;  // temporary directory of begin(), empty when none
  int64_t pending_step_ = -1;
};

}  // namespace ft::ckpt

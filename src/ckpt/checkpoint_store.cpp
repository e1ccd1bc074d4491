#include "ckpt/checkpoint_store.h"
#include "util/fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>

#include "io/safe_path.h"
#include "util/checksum.h"
#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"

namespace ft::ckpt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "finetune-checkpoint-v1";
constexpr const char* kTmpPrefix = ".tmp-";
constexpr const char* kTrashPrefix = ".trash-";
constexpr const char* kOldPrefix = ".old-";  // replace_dir's name for a replaced checkpoint until it is removed

std::string step_name(int64_t step) {
  return fmt::format("step-{:06d}", step);
}

// "step-000123" -> 123; nullopt for anything else.
std::optional<int64_t> parse_step_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() <= 5) return std::nullopt;
  const std::string digits = name.substr(5);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  if (digits.size() > 18) return std::nullopt;
  return std::stoll(digits);
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Removes `path` by renaming it to a hidden trash name first, so a crash half-way through the removal never
// leaves a partial step-* directory that looks like a corrupt checkpoint.
void remove_via_trash(const fs::path& path) {
  remove_tree_via(path, path.parent_path() /
                            (std::string(kTrashPrefix) + path.filename().string() + "-" + std::to_string(::getpid())));
}

// The digest of every path: the writer's where it has one for a file of that size, else read and hashed.
std::vector<FileDigest> digests_of(const std::vector<fs::path>& paths, const FileDigests& written) {
  std::vector<FileDigest> out(paths.size());
  std::vector<fs::path> unknown;
  std::vector<size_t> unknown_at;
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto it = written.find(paths[i].lexically_normal());
    if (it != written.end() && fs::file_size(paths[i]) == it->second.size) {
      out[i] = it->second;
    } else {
      unknown.push_back(paths[i]);
      unknown_at.push_back(i);
    }
  }
  const auto hashed = sha256_files(unknown);
  for (size_t j = 0; j < unknown.size(); ++j) out[unknown_at[j]] = hashed[j];
  return out;
}

// replace_dir's fallback (file systems without an atomic swap) renames a re-saved step-N aside as
// .old-step-N-<pid> before moving the new one in: a crash between the two renames leaves only that. Renamed back
// where step-N is missing; otherwise it is a leftover.
void restore_replaced_checkpoints(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const size_t pid_at = name.rfind('-');
    if (!starts_with(name, kOldPrefix) || pid_at == std::string::npos || pid_at <= std::strlen(kOldPrefix)) continue;
    const std::string original = name.substr(std::strlen(kOldPrefix), pid_at - std::strlen(kOldPrefix));
    std::error_code ec;
    if (!parse_step_name(original) || fs::exists(dir / original, ec)) continue;
    fs::rename(entry.path(), dir / original);
    FT_LOG_WARN("restored checkpoint {} from {}, left by a save interrupted while replacing it", original, name);
  }
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path run_dir, CheckpointStoreOptions opts)
    : dir_(std::move(run_dir) / "checkpoints"), opts_(opts) {
  if (opts_.keep_last < 0)
    throw ConfigError(fmt::format("checkpoint.keep_last = {} must be >= 0", opts_.keep_last),
                      "0 keeps every checkpoint");
}

CheckpointStore::~CheckpointStore() {
  abort();
}

void CheckpointStore::abort() noexcept {
  if (pending_.empty()) return;
  try {
    remove_tree(pending_);
  } catch (const Error& e) {
    FT_LOG_WARN("could not remove temporary checkpoint directory: {}", e.what());
  }
  pending_.clear();
  pending_step_ = -1;
}

fs::path CheckpointStore::begin(int64_t step) {
  FT_CHECK(step >= 0, "checkpoint step must be >= 0");
  abort();
  try {
    fs::create_directories(dir_);
    restore_replaced_checkpoints(dir_);
    // Leftovers of a crash: temporary and trash directories are never valid checkpoints.
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (starts_with(name, kTmpPrefix) || starts_with(name, kTrashPrefix) || starts_with(name, kOldPrefix))
        remove_tree(entry.path());
    }
    pending_ = dir_ / (std::string(kTmpPrefix) + step_name(step) + "-" + std::to_string(::getpid()));
    fs::create_directory(pending_);
  } catch (const fs::filesystem_error& e) {
    pending_.clear();
    throw Error(fmt::format("cannot prepare checkpoint directory under '{}': {}", dir_.string(), e.code().message()),
                ft::write_error_hint(e.code().value()));
  }
  pending_step_ = step;
  return pending_;
}

fs::path CheckpointStore::commit(std::optional<double> metric, const nlohmann::json& extra, const FileDigests& written) {
  if (pending_.empty()) throw Error("CheckpointStore::commit() without begin()");
  const fs::path target = dir_ / step_name(pending_step_);
  try {
    if (fs::exists(pending_ / kManifest))
      throw Error(fmt::format("'{}' is reserved for the checkpoint store", kManifest),
                  "write the checkpoint's own files under other names");
    nlohmann::json files = nlohmann::json::object();
    std::vector<fs::path> dirs{pending_};
    std::vector<fs::path> paths;
    for (auto it = fs::recursive_directory_iterator(pending_); it != fs::recursive_directory_iterator(); ++it) {
      const bool link = it->is_symlink();
      if (!link && it->is_directory()) {
        dirs.push_back(it->path());
        continue;
      }
      if (link || !it->is_regular_file())
        throw Error(fmt::format("checkpoint entry '{}' is not a regular file", it->path().string()));
      paths.push_back(it->path());
    }
    const auto digests = digests_of(paths, written);
    for (size_t i = 0; i < paths.size(); ++i) {
      fsync_path(paths[i], /*directory=*/false);
      // The path below the checkpoint directory (not fs::relative: see remove_tree about libtorch's exports).
      const std::string rel = paths[i].generic_string().substr(pending_.generic_string().size() + 1);
      files[rel] = {{"size", digests[i].size}, {"sha256", digests[i].sha256}};
    }
    const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char created[32];
    std::tm tm{};
    gmtime_r(&now, &tm);
    std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    nlohmann::json manifest = {{"format", kFormat},
                               {"step", pending_step_},
                               {"created", created},
                               {"metric", metric ? nlohmann::json(*metric) : nlohmann::json(nullptr)},
                               {"files", files}};
    if (!extra.is_null()) manifest["extra"] = extra;
    ft::write_file(pending_ / kManifest, manifest.dump(2) + "\n", /*sync=*/true);
    for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) fsync_path(*d, /*directory=*/true);
    // A checkpoint of the same step (a resumed run saving again) is replaced in one swap (replace_dir).
    replace_dir(pending_, target, /*sync=*/true);
  } catch (const fs::filesystem_error& e) {
    abort();
    throw Error(fmt::format("cannot commit checkpoint '{}': {}", target.string(), e.code().message()),
                ft::write_error_hint(e.code().value()));
  } catch (...) {
    abort();
    throw;
  }
  pending_.clear();
  const int64_t step = pending_step_;
  pending_step_ = -1;
  prune(step);
  return target;
}

void CheckpointStore::prune(int64_t newest_step) {
  if (opts_.keep_last == 0) return;
  // Steps past the one just saved belong to a run that was resumed from an earlier checkpoint (its newer ones
  // failed verification, or checkpoint.resume named an older one): they neither count toward keep_last nor go.
  std::vector<CheckpointInfo> all;  // sorted by step
  for (auto& c : list(dir_.parent_path())) {
    if (c.step <= newest_step) all.push_back(std::move(c));
  }
  std::set<int64_t> keep{newest_step};
  for (size_t i = 0; i < all.size() && static_cast<int64_t>(i) < opts_.keep_last; ++i)
    keep.insert(all[all.size() - 1 - i].step);
  if (opts_.keep_best) {
    const CheckpointInfo* best = nullptr;
    for (const auto& c : all)
      if (c.metric && (!best || *c.metric < *best->metric)) best = &c;
    if (best) keep.insert(best->step);
  }
  for (const auto& c : all) {
    if (keep.count(c.step)) continue;
    try {
      remove_via_trash(c.path);
    } catch (const fs::filesystem_error& e) {
      // The new checkpoint is safely committed; a leftover old one only costs disk space.
      FT_LOG_WARN("could not delete old checkpoint '{}': {}", c.path.string(), e.code().message());
    } catch (const Error& e) {
      FT_LOG_WARN("could not delete old checkpoint '{}': {}", c.path.string(), e.what());
    }
  }
}

std::vector<CheckpointInfo> CheckpointStore::list(const fs::path& run_dir) {
  std::vector<CheckpointInfo> out;
  const fs::path dir = run_dir / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto step = parse_step_name(entry.path().filename().string());
    if (!step || !entry.is_directory() || !fs::exists(entry.path() / kManifest)) continue;
    CheckpointInfo info{entry.path(), *step, std::nullopt};
    std::ifstream in(entry.path() / kManifest);
    const auto manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (manifest.is_object() && manifest.contains("metric") && manifest["metric"].is_number())
      info.metric = manifest["metric"].get<double>();
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

VerifyResult CheckpointStore::verify(const fs::path& checkpoint_dir) {
  const fs::path manifest_path = checkpoint_dir / kManifest;
  if (!fs::exists(manifest_path)) return {false, "missing manifest.json"};
  std::ifstream in(manifest_path);
  const auto manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto format = manifest.is_object() ? manifest.find("format") : manifest.end();
  if (!manifest.is_object() || format == manifest.end() || *format != kFormat || !manifest.contains("files") ||
      !manifest["files"].is_object())
    return {false, "manifest.json is unreadable or not a finetune checkpoint manifest"};
  // Sizes first (cheap: a truncated or missing file fails here), then every checksum, several files at a time.
  std::vector<std::string> rels;
  std::vector<fs::path> paths;
  for (const auto& [rel, meta] : manifest["files"].items()) {
    fs::path file;
    try {  // a manifest made elsewhere must not make us read outside the checkpoint
      file = io::resolve_inside(checkpoint_dir, rel, manifest_path, "file entry", /*allow_subdirs=*/true);
    } catch (const ConfigError& e) {
      return {false, e.what()};
    }
    if (!meta.is_object() || !meta.contains("size") || !meta["size"].is_number_unsigned() || !meta.contains("sha256") ||
        !meta["sha256"].is_string())
      return {false, rel + ": bad manifest entry"};
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec) return {false, rel + ": missing"};
    const auto expected_size = meta["size"].get<uint64_t>();
    if (size != expected_size)
      return {false, fmt::format("{}: size {} != {} in the manifest", rel, size, expected_size)};
    rels.push_back(rel);
    paths.push_back(file);
  }
  // Files read by fixed name need not be listed: no symlink anywhere in the checkpoint may leave it (commit() never
  // writes symlinks at all).
  std::error_code walk_ec;
  for (auto it = fs::recursive_directory_iterator(checkpoint_dir, walk_ec); !walk_ec && it != fs::end(it);
       it.increment(walk_ec)) {
    if (it->is_symlink() && !io::resolves_inside(it->path(), {checkpoint_dir}))
      return {false, fmt::format("{}: a symlink that resolves outside the checkpoint directory",
                                 it->path().string().substr(
                                     std::min(it->path().string().size(), checkpoint_dir.string().size() + 1)))};
  }
  std::vector<FileDigest> digests;
  try {
    digests = sha256_files(paths);
  } catch (const Error& e) {
    return {false, e.what()};
  }
  for (size_t i = 0; i < rels.size(); ++i) {
    if (digests[i].sha256 != manifest["files"][rels[i]]["sha256"].get<std::string>())
      return {false, rels[i] + ": checksum mismatch"};
  }
  return {true, {}};
}

std::optional<CheckpointInfo> CheckpointStore::find_latest_valid(const fs::path& run_dir) {
  const fs::path dir = run_dir / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  restore_replaced_checkpoints(dir);
  std::vector<CheckpointInfo> candidates;  // every step-* directory, with or without a manifest
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto step = parse_step_name(entry.path().filename().string());
    if (step && entry.is_directory()) candidates.push_back({entry.path(), *step, std::nullopt});
  }
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  for (auto& c : candidates) {
    const VerifyResult v = verify(c.path);
    if (v.ok) {
      for (const auto& listed : list(run_dir))
        if (listed.step == c.step) c.metric = listed.metric;
      return c;
    }
    FT_LOG_WARN("skipping corrupt checkpoint '{}': {}", c.path.string(), v.problem);
  }
  return std::nullopt;
}

}  // namespace ft::ckpt

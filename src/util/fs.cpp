#include "util/fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "util/error.h"
#include "util/file_writer.h"
#include "util/fmt.h"
#include "util/log.h"

namespace ft {
namespace {

int remove_entry(const char* path, const struct stat* /*st*/, int /*type*/, struct FTW* /*ftw*/) {
  return (std::remove(path) == 0 || errno == ENOENT) ? 0 : -1;
}

}  // namespace

void remove_tree(const std::filesystem::path& path) {
  if (::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) {
    throw Error("cannot remove '" + path.string() + "': " + std::strerror(errno),
                "check permissions of the directory and that no other process holds files in it");
  }
}

std::string read_text_file(const std::filesystem::path& path, const std::string& hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string(), hint);
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::string text(size > 0 ? static_cast<size_t>(size) : 0, '\0');
  if (size > 0 && !in.read(text.data(), size)) throw Error("cannot read " + path.string(), hint);
  return text;
}

void fsync_path(const std::filesystem::path& path, bool directory) {
  UniqueFd fd(::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC));
  if (fd.get() < 0) throw_io_error("cannot open for fsync", path, errno);
  if (::fsync(fd.get()) != 0) throw_io_error("fsync failed for", path, errno);
}

void remove_tree_via(const std::filesystem::path& path, const std::filesystem::path& trash) {
  remove_tree(trash);
  std::filesystem::rename(path, trash);
  remove_tree(trash);
}

void replace_dir(const std::filesystem::path& staged, const std::filesystem::path& target, bool sync) {
  const auto parent = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  const bool had_target = std::filesystem::exists(std::filesystem::symlink_status(target, ec));
  // One atomic swap where the file system has it (renameat2's RENAME_EXCHANGE: ext4, xfs, btrfs, tmpfs, overlayfs):
  // `target` always names a whole directory, the old one or the new, and the old one is left under `staged`'s name,
  // which nothing reads.
  if (had_target && ::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    if (sync) fsync_path(parent, /*directory=*/true);
    try {
      remove_tree(staged);
    } catch (const Error& e) {  // the new one is in place; the old one only costs space
      FT_LOG_WARN("could not remove the replaced directory {}: {}", staged.string(), e.what());
    }
    return;
  }
  // Elsewhere (NFS, FUSE, a sandbox that blocks renameat2; a real error shows in the renames below): the old one is
  // renamed aside first; a crash between the two renames leaves it under replaced_name(target), where
  // CheckpointStore looks for it.
  const auto old = replaced_name(target);
  remove_tree(old);
  if (had_target) std::filesystem::rename(target, old);
  try {
    std::filesystem::rename(staged, target);
  } catch (...) {
    if (had_target) std::filesystem::rename(old, target, ec);  // put the old one back; the rename's error is the news
    throw;
  }
  if (sync) fsync_path(parent, /*directory=*/true);
  if (had_target) remove_tree(old);
}

std::filesystem::path replaced_name(const std::filesystem::path& target) {
  const auto parent = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  return parent / (".old-" + target.filename().string() + "-" + std::to_string(::getpid()));
}

StagedDir::StagedDir(std::filesystem::path target, std::filesystem::path staging)
    : target_(std::move(target)), staging_(std::move(staging)) {
  remove_tree(staging_);
  std::filesystem::create_directories(staging_);
}

StagedDir::~StagedDir() {
  if (committed_) return;
  try {
    remove_tree(staging_);
  } catch (const Error& e) {
    FT_LOG_WARN("could not remove the temporary directory {}: {}", staging_.string(), e.what());
  }
}

void StagedDir::commit(bool sync) {
  replace_dir(staging_, target_, sync);
  committed_ = true;
}

}  // namespace ft

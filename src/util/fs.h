// File-system helpers that avoid std::filesystem::remove_all: libtorch.so exports its own copy of it, which
// crashes when the dynamic linker binds it ahead of libstdc++'s (seen with GCC 12 and 13 builds).
#pragma once

#include <filesystem>
#include <string>

namespace ft {

// Removes `path` and everything below it (no-op when it does not exist). Symbolic links are removed, never
// followed. Throws ft::Error with the OS reason on failure.
void remove_tree(const std::filesystem::path& path);

// The whole file as bytes. Throws ft::Error naming the file, with `hint`, when it cannot be read.
std::string read_text_file(const std::filesystem::path& path,
                           const std::string& hint = "check that the file exists and is readable");

// Flushes a file's or directory's metadata and contents to stable storage (fsync). Throws ft::Error on failure.
void fsync_path(const std::filesystem::path& path, bool directory);

// Removes the directory `path` by renaming it to `trash` (a name nothing reads) first, so a crash half-way through
// the removal never leaves a partial directory under its real name.
void remove_tree_via(const std::filesystem::path& path, const std::filesystem::path& trash);

// Moves the finished directory `staged` to `target`, replacing an existing `target` without ever losing both: the
// two are swapped atomically and the old one removed; where the file system cannot swap, the old one is renamed
// aside (to replaced_name(target)), the new one renamed in, then the old one removed. `sync` flushes the parent
// directory after the rename. Both paths must be on one file system (siblings, in practice).
void replace_dir(const std::filesystem::path& staged, const std::filesystem::path& target, bool sync = false);
// ".old-<name>-<pid>" beside `target`: where replace_dir's fallback keeps the old directory between its renames.
std::filesystem::path replaced_name(const std::filesystem::path& target);

// A directory written under the temporary name `staging` (removed first if left over) and moved to `target` by
// commit() with replace_dir, so readers never see it half-written and an earlier `target` survives a failure.
// Removed when destroyed uncommitted.
class StagedDir {
 public:
  StagedDir(std::filesystem::path target, std::filesystem::path staging);
  ~StagedDir();
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;
  const std::filesystem::path& path() const { return staging_; }  // where the contents go
  void commit(bool sync = false);

 private:
  std::filesystem::path target_, staging_;
  bool committed_ = false;
};

}  // namespace ft

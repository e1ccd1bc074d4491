// Paths named inside files we read (a sharded checkpoint's index, a training checkpoint's manifest) stay inside the
// directory that holds them: a model directory or checkpoint made by someone else must not make us read elsewhere.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ft::io {

// Resolves `name`, listed in `listing` (e.g. model.safetensors.index.json) as `what` (e.g. "weight_map entry 'x'"),
// to dir / name. Throws ft::ConfigError naming `listing`, `what` and `name` when `name` is empty, holds a NUL byte,
// is absolute, has a "." or ".." component, has any directory component (unless `allow_subdirs`), or names an
// existing file that resolves (through symlinks) outside every one of `roots` (default: `dir` itself).
std::filesystem::path resolve_inside(const std::filesystem::path& dir, const std::string& name,
                                     const std::filesystem::path& listing, const std::string& what, bool allow_subdirs,
                                     const std::vector<std::filesystem::path>& roots = {});

// Where the files of a Hugging Face model directory may resolve to: the directory itself, and for a hub cache
// snapshot (<repo>/snapshots/<revision>/, whose files are symlinks into <repo>/blobs/) that repository's blobs.
std::vector<std::filesystem::path> model_dir_roots(const std::filesystem::path& dir);

// Throws ft::ConfigError (exit 2) when `file`, a file of the model directory `dir`, resolves through symlinks
// outside model_dir_roots(dir); `consequence` (e.g. "; no tokenizer file was copied") ends the message.
void require_inside_model_dir(const std::filesystem::path& file, const std::filesystem::path& dir,
                              const std::string& consequence = "");

// Whether `path`, with every symlink resolved, lies inside one of `roots` (each resolved as well).
bool resolves_inside(const std::filesystem::path& path, const std::vector<std::filesystem::path>& roots);

}  // namespace ft::io

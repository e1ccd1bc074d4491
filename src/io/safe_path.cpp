#include "io/safe_path.h"

#include <climits>
#include <cstdlib>

#include <algorithm>
#include <string>
#include <system_error>

#include "util/error.h"

namespace ft::io {
namespace fs = std::filesystem;
namespace {

// Whether `path` is `root` or lies below it (both absolute and normalized).
bool has_prefix(const fs::path& path, const fs::path& root) {
  std::string r = root.string();
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  const std::string p = path.string();
  if (r == "/") return true;
  return p == r || (p.size() > r.size() && p.compare(0, r.size(), r) == 0 && p[r.size()] == '/');
}

// `path` with every symlink resolved (realpath(3); not fs::weakly_canonical, which libtorch.so also exports, see
// util/fs.h); a path that does not exist is made absolute and normalized lexically.
fs::path resolved(const fs::path& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) return fs::path(buf);
  const fs::path abs = path.is_absolute() ? path : fs::current_path() / path;
  return abs.lexically_normal();
}

}  // namespace

bool resolves_inside(const fs::path& path, const std::vector<fs::path>& roots) {
  const fs::path target = resolved(path);
  return std::any_of(roots.begin(), roots.end(),
                     [&](const fs::path& root) { return has_prefix(target, resolved(root)); });
}

fs::path resolve_inside(const fs::path& dir, const std::string& name, const fs::path& listing, const std::string& what,
                        bool allow_subdirs, const std::vector<fs::path>& roots) {
  const auto refuse = [&](const std::string& problem) {
    return ConfigError(listing.string() + ": " + what + " names '" + name + "': " + problem,
                       "files listed there must lie inside " + dir.string() +
                           "; the directory may come from an untrusted source, re-download or re-save it");
  };
  if (name.empty()) throw refuse("an empty file name");
  if (name.find('\0') != std::string::npos) throw refuse("the name holds a NUL byte");
  const fs::path rel(name);
  if (rel.is_absolute() || name.front() == '/') throw refuse("an absolute path is not allowed");
  for (const auto& part : rel) {
    if (part == "..") throw refuse("a '..' component would leave the directory");
    if (part == ".") throw refuse("a '.' component is not allowed");
  }
  if (!allow_subdirs && name.find('/') != std::string::npos) {
    throw refuse(
        "a directory component is not allowed (shards are plain file names in the same directory, such as "
        "model-00001-of-00004.safetensors)");
  }
  const fs::path path = dir / rel;
  std::error_code ec;
  if (fs::exists(fs::symlink_status(path, ec)) &&
      !resolves_inside(path, roots.empty() ? std::vector<fs::path>{dir} : roots)) {
    throw refuse("it resolves to " + resolved(path).string() + ", outside " + resolved(dir).string() +
                 " (a symlink leaving the directory)");
  }
  return path;
}

// Where the files of a model directory may resolve to: the directory itself, and for a Hugging Face hub cache
// snapshot (<repo>/snapshots/<revision>/, whose files are symlinks into <repo>/blobs/) that repository's blobs.
std::vector<std::filesystem::path> model_dir_roots(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> roots{dir};
  const auto abs = std::filesystem::absolute(dir).lexically_normal();
  const auto parent = (abs.has_filename() ? abs : abs.parent_path()).parent_path();
  if (parent.filename() == "snapshots") roots.push_back(parent.parent_path() / "blobs");
  return roots;
}

void require_inside_model_dir(const fs::path& file, const fs::path& dir, const std::string& consequence) {
  if (!resolves_inside(file, model_dir_roots(dir))) {
    throw ConfigError(
        file.string() + " resolves outside " + dir.string() + " (a symlink leaving the directory)" + consequence,
        "the model directory may come from an untrusted source; re-download or re-save it");
  }
}

}  // namespace ft::io

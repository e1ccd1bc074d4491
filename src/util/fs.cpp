#include "util/fs.h"

#include <ftw.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "util/error.h"

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

}  // namespace ft

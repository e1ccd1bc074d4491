#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace ft::io {
namespace {

// Closes the descriptor on every path out of open(); the mapping stays valid after close.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (guard.fd < 0) {
    throw Error("cannot open " + path.string() + ": " + std::strerror(errno), "check that the file exists and is readable");
  }
  struct stat st {};
  if (::fstat(guard.fd, &st) != 0) throw Error("cannot stat " + path.string() + ": " + std::strerror(errno));
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) return std::shared_ptr<MappedFile>(new MappedFile(path, nullptr, 0));
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, guard.fd, 0);
  if (addr == MAP_FAILED) throw Error("cannot mmap " + path.string() + ": " + std::strerror(errno));
  return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<std::uint8_t*>(addr), size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace ft::io

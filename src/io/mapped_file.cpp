#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "util/error.h"
#include "util/parallel.h"

namespace ft::io {
namespace {

// Closes the descriptor on every path out of open() that does not hand it to a MappedFile.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

// pread until `n` bytes are in or the file ends (short reads and EINTR are retried).
void read_range(int fd, const std::filesystem::path& path, std::uint64_t offset, std::uint8_t* dst, std::size_t n) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error("cannot read " + path.string() + ": " + std::strerror(errno));
    if (got == 0) throw Error("cannot read " + path.string() + ": the file ended early (changed while in use?)");
    dst += got;
    offset += static_cast<std::uint64_t>(got);
    n -= static_cast<std::size_t>(got);
  }
}

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (guard.fd < 0) {
    throw Error("cannot open " + path.string() + ": " + std::strerror(errno), "check that the file exists and is readable");
  }
  struct stat st {};
  if (::fstat(guard.fd, &st) != 0) throw Error("cannot stat " + path.string() + ": " + std::strerror(errno));
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) return std::shared_ptr<MappedFile>(new MappedFile(path, guard.release(), nullptr, 0));
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, guard.fd, 0);
  if (addr == MAP_FAILED) throw Error("cannot mmap " + path.string() + ": " + std::strerror(errno));
  return std::shared_ptr<MappedFile>(new MappedFile(path, guard.release(), static_cast<std::uint8_t*>(addr), size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::read(std::uint64_t offset, void* dst, std::size_t n) const {
  if (offset > size_ || n > size_ - offset) {
    throw Error("cannot read bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) + ") of " +
                path_.string() + ": the file has " + std::to_string(size_));
  }
  // Pieces of 8 MiB: large enough for a disk's request size, small enough to spread one 64 MiB staging chunk over
  // eight readers (an H200 host read an 8B model's page-cached files at 26 GB/s so, 5 GB/s with one reader).
  constexpr std::size_t kPiece = std::size_t{8} << 20;
  auto* out = static_cast<std::uint8_t*>(dst);
  parallel_tasks(static_cast<int64_t>((n + kPiece - 1) / kPiece), [&](int64_t p) {
    const std::size_t start = static_cast<std::size_t>(p) * kPiece;
    read_range(fd_, path_, offset + start, out + start, std::min(kPiece, n - start));
  });
}

}  // namespace ft::io

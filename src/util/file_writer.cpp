#include "util/file_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/error.h"
#include "util/fmt.h"

namespace ft {

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int UniqueFd::close() {
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

namespace {

UniqueFd open_lock_file(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw_io_error("cannot open the lock file", path, errno);
  return fd;
}

}  // namespace

FileLock::FileLock(const std::filesystem::path& path) : fd_(open_lock_file(path)) {
  while (::flock(fd_.get(), LOCK_EX) != 0) {
    if (errno != EINTR) throw_io_error("cannot lock", path, errno);
  }
}

std::optional<FileLock> FileLock::try_lock(const std::filesystem::path& path) {
  UniqueFd fd = open_lock_file(path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return std::nullopt;
    throw_io_error("cannot lock", path, errno);
  }
  return FileLock(std::move(fd));
}

FileLock::~FileLock() {
  if (fd_.get() >= 0) ::flock(fd_.get(), LOCK_UN);
}

bool locked_by_another(const std::filesystem::path& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return false;
  const bool held = ::flock(fd.get(), LOCK_SH | LOCK_NB) != 0;
  if (!held) ::flock(fd.get(), LOCK_UN);
  return held;
}

std::string write_error_hint(int err) {
  if (err == ENOSPC || err == EFBIG || err == EDQUOT) {
    return "free disk space (or raise the quota or file size limit) where the output goes, or lower "
           "checkpoint.keep_last; files written before are untouched";
  }
  return "check that the output directory exists and is writable";
}

void throw_io_error(const std::string& what, const std::filesystem::path& path, int err) {
  throw Error(fmt::format("{} '{}': {}", what, path.string(), std::strerror(err)), write_error_hint(err));
}

FileWriter::FileWriter(std::filesystem::path path)
    : path_(std::move(path)), fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
  if (fd_.get() < 0) throw_io_error("cannot create", path_, errno);
}

FileWriter::~FileWriter() {
  if (!finished_ && fd_.get() >= 0) {
    fd_.close();
    ::unlink(path_.c_str());
  }
}

void FileWriter::fail(const char* what, int err) {
  fd_.close();
  ::unlink(path_.c_str());
  throw_io_error(what, path_, err);
}

void FileWriter::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_.get(), p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void FileWriter::finish(bool sync) {
  if (sync && ::fsync(fd_.get()) != 0) fail("fsync failed for", errno);
  if (fd_.close() != 0) fail("close failed for", errno);
  finished_ = true;
}

void write_file(const std::filesystem::path& path, std::string_view bytes, bool sync) {
  FileWriter out(path);
  out.write(bytes);
  out.finish(sync);
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  // Unique per host, process and thread: writers on a shared file system never share a temporary file.
  static std::atomic<uint64_t> counter{0};
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::filesystem::path tmp =
      path.string() + ".tmp." + host + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  write_file(tmp, bytes);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io_error("cannot rename '" + tmp.string() + "' to", path, err);
  }
}

}  // namespace ft

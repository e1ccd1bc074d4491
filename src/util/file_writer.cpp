#include "util/file_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

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

void FileWriter::FreeDeleter::operator()(char* p) const {
  std::free(p);
}

FileWriter::FileWriter(std::filesystem::path path, bool direct) : path_(std::move(path)) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (direct) {
    fd_.reset(::open(path_.c_str(), kFlags | O_DIRECT, 0644));
    void* buffer = nullptr;
    if (fd_.get() >= 0 && ::posix_memalign(&buffer, kDirectAlign, kDirectBuffer) == 0) {
      buffer_.reset(static_cast<char*>(buffer));
      return;
    }
    fd_.reset();  // EINVAL: a filesystem without O_DIRECT; or no memory for the buffer
  }
  fd_.reset(::open(path_.c_str(), kFlags, 0644));
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
  if (!buffer_) {
    sha_.update(p, size);
    while (size > 0) {
      const size_t n = std::min(size, kWritebackEvery);
      write_fd(p, n);
      p += n;
      size -= n;
      start_writeback();
    }
    return;
  }
  while (size > 0) {
    const size_t n = std::min(size, kDirectBuffer - buffered_);
    std::memcpy(buffer_.get() + buffered_, p, n);
    buffered_ += n;
    p += n;
    size -= n;
    if (buffered_ == kDirectBuffer) flush_direct(/*last=*/false);
  }
}

void FileWriter::write_fd(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_.get(), data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    data += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void FileWriter::start_writeback() {
  if (written_ - writeback_from_ < kWritebackEvery) return;
  // The kernel would otherwise start writing a large file only when the dirty pages reach a share of the RAM (10 %:
  // 12 GB on a 128 GB host) or age 30 s, leaving the disk idle while the file is written and making the final fsync
  // wait for all of it. A hint only: a failure (a filesystem without it) changes nothing, and fsync reports real
  // write errors.
  (void)::sync_file_range(fd_.get(), static_cast<off_t>(writeback_from_), static_cast<off_t>(written_ - writeback_from_),
                          SYNC_FILE_RANGE_WRITE);
  writeback_from_ = written_;
}

void FileWriter::flush_direct(bool last) {
  // O_DIRECT writes whole blocks from aligned memory at aligned offsets; every flush but the last is whole blocks.
  // The disk and SHA-256 take about as long for the same bytes: the hash runs beside the write.
  const size_t whole = buffered_ / kDirectAlign * kDirectAlign;
  std::thread hashing([this] { sha_.update(buffer_.get(), buffered_); });
  try {
    write_fd(buffer_.get(), whole);
  } catch (...) {
    hashing.join();
    throw;
  }
  hashing.join();
  const size_t tail = buffered_ - whole;
  if (tail > 0) {
    FT_CHECK(last, "FileWriter: a partial block before the end of the file");
    const int flags = ::fcntl(fd_.get(), F_GETFL);
    if (flags < 0 || ::fcntl(fd_.get(), F_SETFL, flags & ~O_DIRECT) != 0) fail("cannot write", errno);
    write_fd(buffer_.get() + whole, tail);
  }
  buffered_ = 0;
}

FileDigest FileWriter::finish(bool sync) {
  if (buffer_) flush_direct(/*last=*/true);
  if (sync && ::fsync(fd_.get()) != 0) fail("fsync failed for", errno);
  if (fd_.close() != 0) fail("close failed for", errno);
  finished_ = true;
  return {sha_.hex_digest(), written_};
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

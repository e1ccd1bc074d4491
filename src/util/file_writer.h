// Files written through POSIX calls, so that a failure names the file and the OS reason (ENOSPC, EFBIG, EACCES)
// with a hint, and a file that could not be written completely is removed rather than left truncated.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "util/checksum.h"

namespace ft {

// An owned file descriptor (-1: none), closed on destruction.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  // Closes the descriptor held (if any) and holds `fd` instead.
  void reset(int fd = -1) noexcept;
  // Gives up ownership without closing.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes now and returns close()'s result (NFS and some filesystems report write errors only here).
  int close();

 private:
  int fd_;
};

// An exclusive advisory lock (flock) on a lock file, created if missing, released when destroyed. Separate objects
// lock independently, also within one process (each opens its own descriptor).
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);  // waits until the lock is free
  // The lock if no other process holds it now, else nullopt.
  static std::optional<FileLock> try_lock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(FileLock&&) = default;
  FileLock& operator=(FileLock&&) = default;

 private:
  explicit FileLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

// True when some process holds an exclusive lock on `path` now (false when the file does not exist).
bool locked_by_another(const std::filesystem::path& path);

// What to do about a failed write with this errno (disk full and file size limits get their own advice).
std::string write_error_hint(int err);
// Throws ft::Error "<what> '<path>': <strerror(err)>" with write_error_hint(err).
[[noreturn]] void throw_io_error(const std::string& what, const std::filesystem::path& path, int err);

// Writes one file from start to end. Unless finish() succeeds, the file is removed when the writer dies.
//
// finish() returns the file's SHA-256 and size, computed from the bytes as they are written, so a checkpoint's
// manifest need not read its files back.
//
// Large files (`direct`: checkpoints and model weights) bypass the page cache (O_DIRECT) through an aligned 32 MB
// buffer, hashed on a second thread while the disk writes it: on the disks measured, buffered writes of real data
// ran at a fifth of the disk's speed and left the whole file for the final fsync (docs/platforms.md). Filesystems
// without O_DIRECT (tmpfs) get buffered writes. Buffered writers hand every 64 MB to the kernel's writeback at once,
// so the disk starts before the file is complete.
class FileWriter {
 public:
  explicit FileWriter(std::filesystem::path path, bool direct = false);  // creates or truncates `path`
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Flushes to stable storage when `sync`, then closes; the file is complete only after this returns. Returns the
  // SHA-256 and size of everything written.
  FileDigest finish(bool sync);

 private:
  [[noreturn]] void fail(const char* what, int err);
  void write_fd(const char* data, size_t size);  // every byte, retrying short writes
  void start_writeback();  // asks the kernel to write what is written so far, every kWritebackEvery bytes
  void flush_direct(bool last);  // writes the buffer's whole blocks (and, when last, its tail without O_DIRECT)

  static constexpr size_t kWritebackEvery = size_t{64} << 20;
  static constexpr size_t kDirectBuffer = size_t{32} << 20;
  static constexpr size_t kDirectAlign = 4096;
  struct FreeDeleter {
    void operator()(char* p) const;
  };
  std::filesystem::path path_;
  UniqueFd fd_;
  bool finished_ = false;
  size_t written_ = 0;         // bytes written
  size_t writeback_from_ = 0;  // bytes before this offset were handed to start_writeback
  std::unique_ptr<char, FreeDeleter> buffer_;  // direct mode: kDirectBuffer bytes aligned to kDirectAlign
  size_t buffered_ = 0;                        // bytes in buffer_
  Sha256 sha_;                                 // of every byte written
};

// The whole file in one call: FileWriter(path).write(bytes), finish(sync).
void write_file(const std::filesystem::path& path, std::string_view bytes, bool sync = false);
// The whole file through a temporary name beside it (unique to this host, process and call) and a rename, so
// readers never see a partial file.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace ft

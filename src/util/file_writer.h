// Files written through POSIX calls, so that a failure names the file and the OS reason (ENOSPC, EFBIG, EACCES)
// with a hint, and a file that could not be written completely is removed rather than left truncated.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace ft {

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  // Closes now and returns close()'s result (NFS and some filesystems report write errors only here).
  int close();

 private:
  int fd_;
};

// What to do about a failed write with this errno (disk full and file size limits get their own advice).
std::string write_error_hint(int err);
// Throws ft::Error "<what> '<path>': <strerror(err)>" with write_error_hint(err).
[[noreturn]] void throw_io_error(const std::string& what, const std::filesystem::path& path, int err);

// Writes one file from start to end. Unless finish() succeeds, the file is removed when the writer dies.
class FileWriter {
 public:
  explicit FileWriter(std::filesystem::path path);  // creates or truncates `path`
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Flushes to stable storage when `sync`, then closes; the file is complete only after this returns.
  void finish(bool sync);

 private:
  [[noreturn]] void fail(const char* what, int err);

  std::filesystem::path path_;
  UniqueFd fd_;
  bool finished_ = false;
};

// The whole file in one call: FileWriter(path).write(bytes), finish(sync).
void write_file(const std::filesystem::path& path, std::string_view bytes, bool sync = false);
// The whole file through a temporary name beside it and a rename, so readers never see a partial file.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace ft

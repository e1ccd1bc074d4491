// A read-only view of a whole file through mmap (RAII). Pages are mapped copy-on-write, so tensors that alias the
// mapping may be modified in place without touching the file. The file also stays open for positioned reads
// (`read`), which fill a buffer without faulting in the mapping's pages one by one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

namespace ft::io {

class MappedFile {
 public:
  // Maps `path`; throws ft::Error naming the file when it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::uint8_t* mutable_data() { return data_; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // Copies bytes [offset, offset + n) of the file into `dst` with pread, in 8 MiB pieces on several threads when
  // large (util/parallel.h; one reader of the page cache copies about 5 GB/s, and a disk wants several requests in
  // flight). Throws ft::Error naming the file on a failed read or a range past its end.
  void read(std::uint64_t offset, void* dst, std::size_t n) const;

 private:
  MappedFile(std::filesystem::path path, int fd, std::uint8_t* data, std::size_t size)
      : path_(std::move(path)), fd_(fd), data_(data), size_(size) {}
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint8_t* data_ = nullptr;  // nullptr for an empty file
  std::size_t size_ = 0;
};

}  // namespace ft::io

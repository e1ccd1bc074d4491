// A read-only view of a whole file through mmap (RAII). Pages are mapped copy-on-write, so tensors that alias the
// mapping may be modified in place without touching the file.
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

 private:
  MappedFile(std::filesystem::path path, std::uint8_t* data, std::size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::filesystem::path path_;
  std::uint8_t* data_ = nullptr;  // nullptr for an empty file
  std::size_t size_ = 0;
};

}  // namespace ft::io

// Checksums written by hand (no new dependency): SHA-256 for checkpoint manifests, CRC32C for TensorBoard's
// TFRecord framing.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ft {

// Incremental SHA-256 (FIPS 180-4). On x86-64 CPUs with the SHA extensions (Intel since Ice Lake, every AMD Zen)
// the block function uses them (about 5x faster); otherwise, or with allow_hardware = false, portable C++.
class Sha256 {
 public:
  explicit Sha256(bool allow_hardware = true);
  // True when this CPU has the SHA extensions and the build can use them.
  static bool hardware_available();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<uint8_t, 32> digest();  // finalises; the object must not be updated afterwards
  std::string hex_digest();

 private:
  void blocks(const uint8_t* p, size_t count);  // `count` consecutive 64-byte blocks
  std::array<uint32_t, 8> h_;
  bool hardware_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// SHA-256 of a whole file as lowercase hex; its size in `size_out`. Throws ft::Error when unreadable.
std::string sha256_file(const std::filesystem::path& path, uint64_t* size_out = nullptr);

struct FileDigest {
  std::string sha256;  // lowercase hex
  uint64_t size = 0;   // bytes
};
// sha256_file of every path, several files at a time (one thread per file, at most `max_threads`); in input order.
// Throws the first file's ft::Error when any is unreadable.
std::vector<FileDigest> sha256_files(const std::vector<std::filesystem::path>& paths, unsigned max_threads = 8);

// CRC-32C (Castagnoli), continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace ft

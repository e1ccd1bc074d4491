// Checksums written by hand (no new dependency): SHA-256 for checkpoint manifests, CRC32C for TensorBoard's
// TFRecord framing, CRC32 and Adler-32 for PNG/zlib.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ft::train {

// Incremental SHA-256 (FIPS 180-4).
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<uint8_t, 32> digest();  // finalises; the object must not be updated afterwards
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// SHA-256 of a whole file as lowercase hex; its size in `size_out`. Throws ft::Error when unreadable.
std::string sha256_file(const std::filesystem::path& path, uint64_t* size_out = nullptr);

// CRC-32C (Castagnoli), continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);
// CRC-32 (IEEE, as zlib/PNG), continuing from `crc` (0 to start).
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);
// Adler-32 (zlib), continuing from `adler` (1 to start).
uint32_t adler32(const void* data, size_t size, uint32_t adler = 1);

}  // namespace ft::train

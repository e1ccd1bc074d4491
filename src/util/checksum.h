// Checksums: SHA-256 for checkpoint manifests (OpenSSL's libcrypto, which picks the CPU's SHA extensions itself),
// CRC-32C for TensorBoard's TFRecord framing.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ft {

// Incremental SHA-256 (FIPS 180-4) over libcrypto's EVP interface.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<uint8_t, 32> digest();  // finalises; the object must not be updated afterwards
  std::string hex_digest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// SHA-256 of a whole file as lowercase hex; its size in `size_out`. Throws ft::Error when unreadable.
std::string sha256_file(const std::filesystem::path& path, uint64_t* size_out = nullptr);

struct FileDigest {
  std::string sha256;  // lowercase hex
  uint64_t size = 0;   // bytes
};
// Digests of files by path, as their writers computed them (FileWriter::finish).
using FileDigests = std::map<std::filesystem::path, FileDigest>;

// sha256_file of every path, several files at a time (at::parallel_for, one file per task); in input order.
// Throws the first unreadable file's ft::Error.
std::vector<FileDigest> sha256_files(const std::vector<std::filesystem::path>& paths);

// CRC-32C (Castagnoli), continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace ft

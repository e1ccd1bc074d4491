#include "util/checksum.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "util/error.h"
#include "util/parallel.h"

namespace ft {
namespace {

// libcrypto reports failure by return value; these only fail when out of memory or misused.
void check_evp(int ok, const char* what) {
  if (ok != 1) throw Error(std::string("libcrypto: ") + what + " failed");
}

}  // namespace

struct Sha256::Ctx {
  Ctx() : md(EVP_MD_CTX_new()) {
    if (!md) throw Error("libcrypto: EVP_MD_CTX_new failed (out of memory)");
  }
  ~Ctx() { EVP_MD_CTX_free(md); }
  Ctx(const Ctx&) = delete;
  Ctx& operator=(const Ctx&) = delete;
  EVP_MD_CTX* md;
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  check_evp(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr), "EVP_DigestInit_ex(sha256)");
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t size) {
  check_evp(EVP_DigestUpdate(ctx_->md, data, size), "EVP_DigestUpdate");
}

std::array<uint8_t, 32> Sha256::digest() {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  check_evp(EVP_DigestFinal_ex(ctx_->md, out.data(), &len), "EVP_DigestFinal_ex");
  if (len != out.size()) throw Error("libcrypto: SHA-256 digest of " + std::to_string(len) + " bytes");
  return out;
}

std::string Sha256::hex_digest() {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest()) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

std::string sha256_file(const std::filesystem::path& path, uint64_t* size_out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path.string() + "': " + std::strerror(errno));
  Sha256 sha;
  std::vector<char> buf(1 << 20);
  uint64_t size = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    sha.update(buf.data(), n);
    size += n;
  }
  if (in.bad()) throw Error("read error on '" + path.string() + "'");
  if (size_out) *size_out = size;
  return sha.hex_digest();
}

std::vector<FileDigest> sha256_files(const std::vector<std::filesystem::path>& paths) {
  std::vector<FileDigest> out(paths.size());
  parallel_tasks(static_cast<int64_t>(paths.size()), [&](int64_t i) {
    const auto k = static_cast<size_t>(i);
    out[k].sha256 = sha256_file(paths[k], &out[k].size);
  });
  return out;
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};  // reflected, polynomial 0x82f63b78
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace ft

#include "util/hash.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "util/error.h"

namespace ft {

uint64_t hash_bytes(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t hash_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string(), "check that the file exists and is readable");
  std::vector<char> buf(1 << 20);
  uint64_t h = 0xcbf29ce484222325ULL;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h = hash_bytes(buf.data(), static_cast<size_t>(in.gcount()), h);
  }
  return h;
}

std::string hex64(uint64_t value) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) s[static_cast<size_t>(i)] = digits[value & 0xf];
  return s;
}

uint64_t SplitMix64::below(uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x = next();
  while (x >= limit) x = next();
  return x % bound;
}

}  // namespace ft

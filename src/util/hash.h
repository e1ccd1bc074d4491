// Hashing and a portable seeded RNG: stable across platforms and runs (cache keys, fingerprints, data order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ft {

// 64-bit FNV-1a, chainable through `seed`; stable across platforms and runs (used in cache keys).
uint64_t hash_bytes(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ULL);
inline uint64_t hash_string(std::string_view s, uint64_t seed = 0xcbf29ce484222325ULL) {
  return hash_bytes(s.data(), s.size(), seed);
}
// Hash of a file's contents (read in chunks).
uint64_t hash_file(const std::filesystem::path& path);
std::string hex64(uint64_t value);

// splitmix64: a tiny, portable generator, so permutations are identical on every platform and library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) (bound > 0), without modulo bias.
  uint64_t below(uint64_t bound);

 private:
  uint64_t state_;
};

}  // namespace ft

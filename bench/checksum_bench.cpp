// SHA-256 throughput of the checkpoint manifests (libcrypto), one buffer in memory and several files at once.
// Usage: bench_checksum [MiB] (default 512)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "util/checksum.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const long mib = argc > 1 ? std::atol(argv[1]) : 512;
  std::vector<char> data(static_cast<size_t>(mib) << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 2654435761U >> 24);
  auto start = std::chrono::steady_clock::now();
  ft::Sha256 sha;
  sha.update(data.data(), data.size());
  const std::string digest = sha.hex_digest();
  std::printf("SHA-256 of %ld MiB in memory: %.0f MiB/s (%s...)\n", mib,
              static_cast<double>(mib) / seconds_since(start), digest.substr(0, 16).c_str());

  // Four files of a quarter each through sha256_files (read + hash, in parallel), as a checkpoint save does.
  const auto dir = std::filesystem::temp_directory_path() / ("bench_checksum_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::filesystem::path> paths;
  for (int i = 0; i < 4; ++i) {
    paths.push_back(dir / ("f" + std::to_string(i)));
    std::ofstream(paths.back(), std::ios::binary)
        .write(data.data() + i * (data.size() / 4), static_cast<std::streamsize>(data.size() / 4));
  }
  start = std::chrono::steady_clock::now();
  const auto digests = ft::sha256_files(paths);
  std::printf("sha256_files, 4 files of %ld MiB: %.0f MiB/s\n", mib / 4,
              static_cast<double>(mib) / seconds_since(start));
  std::filesystem::remove_all(dir);
  return digests.size() == paths.size() ? 0 : 1;
}

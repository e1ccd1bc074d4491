// SHA-256 throughput of the checkpoint manifests: the portable block function against the SHA extensions.
// Usage: bench_checksum [MiB] (default 512)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "util/checksum.h"

namespace {

double mib_per_s(const std::vector<unsigned char>& data, bool hardware) {
  const auto start = std::chrono::steady_clock::now();
  ft::Sha256 sha(hardware);
  sha.update(data.data(), data.size());
  const std::string digest = sha.hex_digest();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("  %-10s %s\n", hardware ? "extensions" : "portable", digest.substr(0, 16).c_str());
  return static_cast<double>(data.size()) / (1 << 20) / s;
}

}  // namespace

int main(int argc, char** argv) {
  const long mib = argc > 1 ? std::atol(argv[1]) : 512;
  std::vector<unsigned char> data(static_cast<size_t>(mib) << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 2654435761U >> 24);
  std::printf("SHA-256 of %ld MiB\n", mib);
  const double portable = mib_per_s(data, false);
  std::printf("portable: %.0f MiB/s\n", portable);
  if (ft::Sha256::hardware_available()) {
    std::printf("SHA extensions: %.0f MiB/s\n", mib_per_s(data, true));
  } else {
    std::printf("SHA extensions: not available on this CPU\n");
  }
  return 0;
}

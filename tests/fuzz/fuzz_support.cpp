#include "fuzz_support.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "util/log.h"

namespace ft::fuzz {
namespace {

struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    path = std::filesystem::temp_directory_path() / ("ft-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);  // best effort at exit; a crash leaves it for the next run's TMPDIR sweep
  }
};

}  // namespace

const std::filesystem::path& scratch() {
  static const ScratchDir dir;
  return dir.path;
}

void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("fuzz: cannot write " + path.string());
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Input split_mode(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  return {data[0], std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1)};
}

std::string with_mode(uint8_t mode, std::string_view payload) {
  return std::string(1, static_cast<char>(mode)) + std::string(payload);
}

std::pair<std::string_view, std::string_view> cut(std::string_view text, std::string_view separator) {
  const size_t at = text.find(separator);
  if (at == std::string_view::npos) return {text, {}};
  return {text.substr(0, at), text.substr(at + separator.size())};
}

}  // namespace ft::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  ft::log::set_level(ft::log::Level::kOff);
  ft::fuzz::target_setup();
  if (const char* dir = std::getenv("FT_FUZZ_WRITE_SEEDS")) {
    std::filesystem::create_directories(dir);
    const auto seeds = ft::fuzz::seeds();
    for (size_t i = 0; i < seeds.size(); ++i) {
      ft::fuzz::write_bytes(std::filesystem::path(dir) / ("seed-" + std::to_string(i)), seeds[i]);
    }
    std::cout << "wrote " << seeds.size() << " seeds to " << dir << "\n";
    std::exit(0);
  }
  return 0;
}

// Safetensors files written byte by byte, for the tests of what a damaged or hostile file does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace ft::test {

// A safetensors file from a raw header text, `data_bytes` zero bytes of data and an optional false length prefix.
inline void write_raw(const std::filesystem::path& path, const std::string& header, std::size_t data_bytes,
                      std::optional<std::uint64_t> declared_len = std::nullopt) {
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t len = declared_len.value_or(header.size());
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << std::string(data_bytes, '\0');
}

}  // namespace ft::test

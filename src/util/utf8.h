// UTF-8: decoding one code point, encoding, validation and lossy repair. Free of LibTorch (library ft_utf8), for the
// tokenizers, the chat templates and the config alike.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ft::utf8 {

// Decodes the code point starting at s[i] and advances i past it. The input must be valid UTF-8 (callers validate
// once at the API boundary so the hot loops need not).
inline char32_t next_cp(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  auto cont = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b0 < 0xE0) {
    char32_t cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
    i += 2;
    return cp;
  }
  if (b0 < 0xF0) {
    char32_t cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    i += 3;
    return cp;
  }
  char32_t cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
  i += 4;
  return cp;
}

// Byte length of the UTF-8 sequence that starts with lead byte b (1 for a stray continuation byte).
inline size_t utf8_len(unsigned char b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

void append_utf8(std::string& out, char32_t cp);

// Offset of the first byte that is not part of well-formed UTF-8, or nullopt when the whole string is valid.
std::optional<size_t> find_invalid_utf8(std::string_view s);
// Throws ft::Error naming the byte offset: the references take Python str, so invalid UTF-8 has no reference
// behaviour to reproduce and silently replacing it would hide corrupt data.
void check_utf8(std::string_view s, std::string_view what);

// Bytes to text the way Rust's String::from_utf8_lossy and Python's errors="replace" do: each maximal invalid
// subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace ft::utf8

// UTF-8, Unicode property and normalization helpers shared by every tokenizer flavour.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ft::tok::unicode {

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

enum class NormForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize(std::string_view s, NormForm form);
// Whether text can be normalized separately before and after cp (ICU's unorm2_hasBoundaryBefore).
bool has_norm_boundary_before(char32_t cp, NormForm form);
// Per code point full lowercase mapping, as Rust's char::to_lowercase (no context-sensitive final sigma).
std::string lowercase(std::string_view s);

bool is_whitespace(char32_t cp);   // White_Space property (Rust char::is_whitespace, regex \s)
bool is_numeric(char32_t cp);      // General category N* (Rust char::is_numeric)
bool is_word_char(char32_t cp);    // Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control
bool is_mark(char32_t cp);         // General category M* (combining marks)
bool is_punctuation(char32_t cp);  // ASCII punctuation or general category P* (tokenizers' is_punc)

// GPT-2's reversible byte <-> printable-character table used by every byte-level BPE.
const std::array<std::string, 256>& byte_level_chars();  // UTF-8 of the character standing for each byte
int byte_level_byte(char32_t cp);                        // the byte a character stands for, -1 if none
std::string bytes_to_byte_level(std::string_view bytes);

// Standard base64 (RFC 4648, padding optional). nullopt on any invalid character.
std::optional<std::string> base64_decode(std::string_view in);
std::string base64_encode(std::string_view in);

}  // namespace ft::tok::unicode

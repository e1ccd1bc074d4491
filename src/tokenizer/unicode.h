// Unicode property and normalization helpers shared by every tokenizer flavour.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "util/utf8.h"

namespace ft::tok::unicode {

// UTF-8 itself lives in util/utf8.h (one implementation for the tokenizers, the chat templates and the config).
using ft::utf8::append_utf8;
using ft::utf8::check_utf8;
using ft::utf8::find_invalid_utf8;
using ft::utf8::next_cp;
using ft::utf8::utf8_len;
using ft::utf8::utf8_lossy;

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

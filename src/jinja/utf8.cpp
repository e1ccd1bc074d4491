// UTF-8 decoding (lenient, as Python reads a template's bytes), length and Python's character classes for
// ft::jinja; encoding is util/utf8.h's.
#include "jinja/internal.h"

namespace ft::jinja::detail {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    char32_t cp = 0;
    if (c < 0x80) {
      cp = c;
    } else if ((c >> 5) == 0x6) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c >> 4) == 0xE) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c >> 3) == 0x1E) {
      n = 3;
      cp = c & 0x07;
    } else {
      out += static_cast<char32_t>(c);  // invalid byte: kept as a Latin-1 code point
      ++i;
      continue;
    }
    if (i + static_cast<size_t>(n) >= s.size()) {
      out += static_cast<char32_t>(c);
      ++i;
      continue;
    }
    bool ok = true;
    for (int k = 1; k <= n; ++k) {
      if (i + static_cast<size_t>(k) >= s.size() ||
          (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) >> 6) != 0x2) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
    }
    if (!ok) {
      out += static_cast<char32_t>(c);
      ++i;
      continue;
    }
    out += cp;
    i += static_cast<size_t>(n) + 1;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Case mapping: ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic basic blocks (what chat data plausibly holds).
char32_t py_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

char32_t py_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

bool py_isupper(char32_t c) {
  return py_lower(c) != c;
}
bool py_islower(char32_t c) {
  return py_upper(c) != c || c == 0xDF;
}
bool py_isdigit(char32_t c) {
  return c >= '0' && c <= '9';
}
bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (py_isupper(c) || py_islower(c)) return true;
  // CJK, kana, hangul, other letters without case: treat the big letter blocks as alphabetic.
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) || (c >= 0xAC00 && c <= 0xD7A3) ||
         (c >= 0x0600 && c <= 0x06FF && !(c >= 0x0660 && c <= 0x0669)) || (c >= 0x05D0 && c <= 0x05EA) ||
         (c >= 0x0900 && c <= 0x097F);
}
bool py_isalnum(char32_t c) {
  return py_isalpha(c) || py_isdigit(c);
}

}  // namespace ft::jinja::detail

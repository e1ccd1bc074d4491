#include "tokenizer/unicode.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <string>
#include <vector>

#include "util/error.h"

namespace ft::tok::unicode {


namespace {

std::u16string to_utf16(std::string_view s) {
  std::u16string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = next_cp(s, i);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out.push_back(static_cast<char16_t>(0xD800 + (cp >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + (cp & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(cp));
    }
  }
  return out;
}

std::string from_utf16(const char16_t* s, size_t n) {
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    char32_t cp = s[i];
    if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < n) {
      cp = 0x10000 + ((cp - 0xD800) << 10) + (static_cast<char32_t>(s[i + 1]) - 0xDC00);
      ++i;
    }
    append_utf8(out, cp);
  }
  return out;
}

const UNormalizer2* normalizer_for(NormForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (form) {
    case NormForm::kNFC:
      n = unorm2_getNFCInstance(&err);
      break;
    case NormForm::kNFD:
      n = unorm2_getNFDInstance(&err);
      break;
    case NormForm::kNFKC:
      n = unorm2_getNFKCInstance(&err);
      break;
    case NormForm::kNFKD:
      n = unorm2_getNFKDInstance(&err);
      break;
  }
  if (U_FAILURE(err) || n == nullptr) {
    throw ft::Error(std::string("ICU normalizer unavailable: ") + u_errorName(err),
                    "the ICU data library (libicu) is missing or broken");
  }
  return n;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

bool has_norm_boundary_before(char32_t cp, NormForm form) {
  return unorm2_hasBoundaryBefore(normalizer_for(form), static_cast<UChar32>(cp)) != 0;
}

std::string normalize(std::string_view s, NormForm form) {
  // ASCII is invariant under all four forms; most training text is, so skip the UTF-16 round trip.
  if (is_ascii(s)) return std::string(s);
  const UNormalizer2* n = normalizer_for(form);
  const std::u16string in = to_utf16(s);
  UErrorCode err = U_ZERO_ERROR;
  const int32_t span =
      unorm2_spanQuickCheckYes(n, reinterpret_cast<const UChar*>(in.data()), static_cast<int32_t>(in.size()), &err);
  if (U_SUCCESS(err) && span == static_cast<int32_t>(in.size())) return std::string(s);
  err = U_ZERO_ERROR;
  std::vector<char16_t> out(in.size() * 3 + 16);
  int32_t len = unorm2_normalize(n, reinterpret_cast<const UChar*>(in.data()), static_cast<int32_t>(in.size()),
                                 reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    out.resize(static_cast<size_t>(len));
    err = U_ZERO_ERROR;
    len = unorm2_normalize(n, reinterpret_cast<const UChar*>(in.data()), static_cast<int32_t>(in.size()),
                           reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &err);
  }
  if (U_FAILURE(err)) throw ft::Error(std::string("ICU normalization failed: ") + u_errorName(err));
  return from_utf16(out.data(), static_cast<size_t>(len));
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const char32_t cp = next_cp(s, i);
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    } else if (cp == 0x130) {
      // The only unconditional one-to-many lowercase mapping (SpecialCasing.txt); u_tolower is one-to-one.
      out += "i\xCC\x87";
    } else {
      append_utf8(out, static_cast<char32_t>(u_tolower(static_cast<UChar32>(cp))));
    }
  }
  return out;
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE) != 0;
}

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto mask = U_GET_GC_MASK(static_cast<UChar32>(cp));
  return (mask & (U_GC_ND_MASK | U_GC_NL_MASK | U_GC_NO_MASK)) != 0;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
  }
  const auto c = static_cast<UChar32>(cp);
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) return true;
  return (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

bool is_mark(char32_t cp) {
  if (cp < 0x80) return false;
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_M_MASK) != 0;
}

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') || (cp >= '[' && cp <= '`') || (cp >= '{' && cp <= '~');
  }
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_P_MASK) != 0;
}

namespace {

struct ByteLevelTables {
  std::array<std::string, 256> chars;
  std::array<int16_t, 324> bytes{};  // every mapped character is below U+0144
  ByteLevelTables() {
    bytes.fill(-1);
    std::array<bool, 256> printable{};
    for (int b = '!'; b <= '~'; ++b) printable[static_cast<size_t>(b)] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[static_cast<size_t>(b)] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[static_cast<size_t>(b)] = true;
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const int cp = printable[static_cast<size_t>(b)] ? b : next++;
      append_utf8(chars[static_cast<size_t>(b)], static_cast<char32_t>(cp));
      bytes[static_cast<size_t>(cp)] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  return byte_level_tables().chars;
}

int byte_level_byte(char32_t cp) {
  const auto& t = byte_level_tables();
  return cp < t.bytes.size() ? t.bytes[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& chars = byte_level_chars();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += chars[static_cast<unsigned char>(c)];
  return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

std::string base64_encode(std::string_view in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << 16) |
                       (static_cast<uint32_t>(static_cast<unsigned char>(in[i + 1])) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(kAlphabet[(v >> (6 * k)) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint32_t>(static_cast<unsigned char>(in[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace ft::tok::unicode

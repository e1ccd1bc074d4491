#include "util/utf8.h"

#include "util/error.h"

namespace ft::utf8 {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode Table 3-7), or 0 when it is ill-formed. When
// ill-formed, `maximal` receives the length of the maximal subpart, which is what one U+FFFD replaces.
size_t valid_seq_len(std::string_view s, size_t i, size_t& maximal) {
  const auto at = [&](size_t k) -> int { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : -1; };
  const int b0 = at(0);
  maximal = 1;
  if (b0 < 0x80) return 1;
  int lo = 0x80, hi = 0xBF;
  size_t need = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    const int b = at(k);
    const int l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      maximal = k;
      return 0;
    }
  }
  return need;
}

}  // namespace

std::optional<size_t> find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t maximal = 0;
    const size_t n = valid_seq_len(s, i, maximal);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

void check_utf8(std::string_view s, std::string_view what) {
  if (auto bad = find_invalid_utf8(s)) {
    throw ft::Error("invalid UTF-8 in " + std::string(what) + " at byte offset " + std::to_string(*bad),
                    "tokenizers encode Unicode text; decode or clean the input data to UTF-8 first");
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t maximal = 0;
    const size_t n = valid_seq_len(bytes, i, maximal);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += maximal;
    } else {
      out.append(bytes.data() + i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace ft::utf8

// Strings of ft::jinja: UTF-8 decoding (lenient, as Python reads a template's bytes; encoding is util/utf8.h's),
// Python's character classes and case mapping, and the Python str operations (strip, split, replace, str.format)
// of methods and filters, by code point.
#include <cstdlib>

#include "jinja/strings.h"

namespace ft::jinja::detail {

// ------------------------------------------------------------------------------------------------ UTF-8

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

// ------------------------------------------------------------------------------------------------ str operations
void check_result_size(uint64_t count, uint64_t unit, size_t max_bytes) {
  if (unit != 0 && count > max_bytes / unit)
    throw TypeErr("result of " + std::to_string(count) + " x " + std::to_string(unit) +
                  " bytes exceeds the template output limit of " + std::to_string(max_bytes) + " bytes");
}

std::u32string U(const std::string& s) {
  return utf8_decode(s);
}
std::string S(const std::u32string& s) {
  return utf8_encode(s);
}

std::string strip(const std::string& s, const Val* chars, bool left, bool right) {
  std::u32string u = U(s);
  std::u32string set;
  bool ws = !chars || chars->kind == Kind::None;
  if (!ws) set = U(need_str(*chars, "strip arg"));
  auto strip_it = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return S(u.substr(b, e - b));
}

std::string map_chars(const std::string& s, char32_t (*fn)(char32_t)) {
  std::u32string u = U(s);
  for (auto& c : u) c = fn(c);
  return S(u);
}

bool is_cased(char32_t c) {
  return py_isupper(c) || py_islower(c);
}

std::string py_title(const std::string& s) {
  std::u32string u = U(s);
  bool prev_cased = false;
  for (auto& c : u) {
    c = prev_cased ? py_lower(c) : py_upper(c);
    prev_cased = is_cased(c);
  }
  return S(u);
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = U(s);
  for (size_t k = 0; k < u.size(); ++k) u[k] = k == 0 ? py_upper(u[k]) : py_lower(u[k]);
  return S(u);
}

// jinja2's title filter: words start after [-\s({\[<]+.
std::string jinja_title(const std::string& s) {
  std::u32string u = U(s);
  auto delim = [](char32_t c) { return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  bool start = true;
  for (auto& c : u) {
    if (delim(c)) {
      start = true;
      continue;
    }
    c = start ? py_upper(c) : py_lower(c);
    start = false;
  }
  return S(u);
}

// str.split/rsplit() without a separator: runs of whitespace separate, leading and trailing ones are dropped.
static List split_whitespace(const std::string& s, int64_t maxsplit, bool from_right) {
  List out;
  std::u32string u = U(s);
  if (!from_right) {
    size_t i = 0, n = u.size();
    int64_t count = 0;
    while (i < n && py_isspace(u[i])) ++i;
    while (i < n) {
      if (maxsplit >= 0 && count >= maxsplit) {
        out.push_back(Val::str(S(u.substr(i))));
        return out;
      }
      size_t j = i;
      while (j < n && !py_isspace(u[j])) ++j;
      out.push_back(Val::str(S(u.substr(i, j - i))));
      ++count;
      i = j;
      while (i < n && py_isspace(u[i])) ++i;
    }
    return out;
  }
  size_t e = u.size();
  int64_t count = 0;
  while (e > 0 && py_isspace(u[e - 1])) --e;
  while (e > 0) {
    if (maxsplit >= 0 && count >= maxsplit) {
      out.insert(out.begin(), Val::str(S(u.substr(0, e))));
      return out;
    }
    size_t b = e;
    while (b > 0 && !py_isspace(u[b - 1])) --b;
    out.insert(out.begin(), Val::str(S(u.substr(b, e - b))));
    ++count;
    e = b;
    while (e > 0 && py_isspace(u[e - 1])) --e;
  }
  return out;
}

// str.split/rsplit(sep) with a non-empty separator.
static List split_separator(const std::string& s, const std::string& sep, int64_t maxsplit, bool from_right) {
  List out;
  if (!from_right) {
    size_t i = 0;
    int64_t count = 0;
    while (maxsplit < 0 || count < maxsplit) {
      size_t j = s.find(sep, i);
      if (j == std::string::npos) break;
      out.push_back(Val::str(s.substr(i, j - i)));
      i = j + sep.size();
      ++count;
    }
    out.push_back(Val::str(s.substr(i)));
    return out;
  }
  size_t e = s.size();
  int64_t count = 0;
  while (maxsplit < 0 || count < maxsplit) {
    if (e < sep.size()) break;
    size_t j = s.rfind(sep, e - sep.size());
    if (j == std::string::npos) break;
    out.insert(out.begin(), Val::str(s.substr(j + sep.size(), e - j - sep.size())));
    e = j;
    ++count;
  }
  out.insert(out.begin(), Val::str(s.substr(0, e)));
  return out;
}

List split(const std::string& s, const Val* sepv, int64_t maxsplit, bool from_right) {
  if (!sepv || sepv->kind == Kind::None) return split_whitespace(s, maxsplit, from_right);
  const std::string& sep = need_str(*sepv, "separator");
  if (sep.empty()) throw TypeErr("empty separator (ValueError)");
  return split_separator(s, sep, maxsplit, from_right);
}

std::vector<std::string> splitlines(const std::string& s, bool keepends) {
  std::u32string u = U(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
  };
  while (i < u.size()) {
    if (is_break(u[i])) {
      size_t eol = i;
      if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
      ++i;
      out.push_back(S(u.substr(start, (keepends ? i : eol) - start)));
      start = i;
    } else {
      ++i;
    }
  }
  if (start < u.size()) out.push_back(S(u.substr(start)));
  return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& neu, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string u = U(s);
    int64_t n = 0;
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || n < count) {
        out += neu;
        ++n;
      }
      if (k < u.size()) append_utf8(out, u[k]);
    }
    return out;
  }
  size_t i = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t j = s.find(old, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i);
    out += neu;
    i = j + old.size();
    ++n;
  }
  out.append(s, i, std::string::npos);
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Byte offset -> code point index.
int64_t cp_index(const std::string& s, size_t byte_off) {
  return static_cast<int64_t>(utf8_length(s.substr(0, byte_off)));
}

// str.format with {} / {0} / {name} fields (no format specs).
std::string str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if (c == '{') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
        out += '{';
        ++k;
        continue;
      }
      size_t e = fmt.find('}', k);
      if (e == std::string::npos) throw TypeErr("Single '{' encountered in format string (ValueError)");
      std::string field = fmt.substr(k + 1, e - k - 1);
      bool repr = false;
      size_t bang = field.find('!');
      if (bang != std::string::npos) {
        repr = field.substr(bang + 1) == "r";
        field = field.substr(0, bang);
      }
      if (field.find(':') != std::string::npos || field.find('.') != std::string::npos ||
          field.find('[') != std::string::npos)
        throw TypeErr("unsupported str.format field '{" + field + "}' (only {}, {0}, {name} are supported)");
      const Val* v = nullptr;
      if (field.empty()) {
        v = arg(a, auto_idx++, nullptr);
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        v = arg(a, static_cast<size_t>(std::atoi(field.c_str())), nullptr);
      } else {
        for (const auto& [kk, vv] : a.kw)
          if (kk == field) v = &vv;
      }
      if (!v) throw TypeErr("str.format: missing argument for '{" + field + "}' (IndexError/KeyError)");
      out += repr ? to_repr(*v) : to_str(*v);
      k = e;
    } else if (c == '}') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '}')
        ++k;
      else
        throw TypeErr("Single '}' encountered in format string (ValueError)");
      out += '}';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace ft::jinja::detail

// Python str helpers for ft::jinja's builtins: strip, split, replace, case mapping, str.format (by code point).
#include <cstdlib>

#include "jinja/builtins_internal.h"

namespace ft::jinja::detail {

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

List split(const std::string& s, const Val* sepv, int64_t maxsplit, bool from_right) {
  List out;
  if (!sepv || sepv->kind == Kind::None) {
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
  const std::string& sep = need_str(*sepv, "separator");
  if (sep.empty()) throw TypeErr("empty separator (ValueError)");
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

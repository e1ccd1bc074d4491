// Python value semantics for ft::jinja: truthiness, equality, ordering, str()/repr(), json.dumps, UTF-8.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/internal.h"

namespace ft::jinja::detail {

// ----------------------------------------------------------------------------------------------- UTF-8 and chars

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

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
      if (i + static_cast<size_t>(k) >= s.size() || (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) >> 6) != 0x2) {
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
  for (char32_t c : s) utf8_append(out, c);
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

bool py_isupper(char32_t c) { return py_lower(c) != c; }
bool py_islower(char32_t c) { return py_upper(c) != c || c == 0xDF; }
bool py_isdigit(char32_t c) { return c >= '0' && c <= '9'; }
bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (py_isupper(c) || py_islower(c)) return true;
  // CJK, kana, hangul, other letters without case: treat the big letter blocks as alphabetic.
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) || (c >= 0xAC00 && c <= 0xD7A3) ||
         (c >= 0x0600 && c <= 0x06FF && !(c >= 0x0660 && c <= 0x0669)) || (c >= 0x05D0 && c <= 0x05EA) ||
         (c >= 0x0900 && c <= 0x097F);
}
bool py_isalnum(char32_t c) { return py_isalpha(c) || py_isdigit(c); }

// ----------------------------------------------------------------------------------------------- Python semantics

const char* type_name(const Val& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Seq: return (v.flags & kGen) ? "generator" : (v.flags & kTuple) ? "tuple" : "list";
    case Kind::Map: return "dict";
    case Kind::Callable: return "function";
    case Kind::Namespace: return "Namespace";
    case Kind::Loop: return "LoopContext";
  }
  return "object";
}

bool truthy(const Val& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0.0;
    case Kind::String: return !v.s.empty();
    case Kind::Seq: return (v.flags & kGen) || !v.list->empty();
    case Kind::Map: return !v.dict->empty();
    default: return true;
  }
}

bool py_eq(const Val& a, const Val& b) {
  if (a.is_num() && b.is_num()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.s == b.s;
    case Kind::Seq: {
      if ((a.flags & (kTuple | kGen)) != (b.flags & (kTuple | kGen))) return false;
      if (a.flags & kGen) return a.list == b.list;
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!py_eq((*a.list)[k], (*b.list)[k])) return false;
      return true;
    }
    case Kind::Map: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        auto it = std::find_if(b.dict->begin(), b.dict->end(), [&](const auto& p) { return p.first == k; });
        if (it == b.dict->end() || !py_eq(v, it->second)) return false;
      }
      return true;
    }
    case Kind::Callable: return a.fn == b.fn;
    case Kind::Namespace: return a.ns == b.ns;
    case Kind::Loop: return a.loop == b.loop;
    default: return false;
  }
}

bool py_lt(const Val& a, const Val& b) {
  if (a.is_num() && b.is_num()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_str() && b.is_str()) return a.s < b.s;  // UTF-8 byte order == code point order
  if (a.kind == Kind::Seq && b.kind == Kind::Seq && (a.flags & kTuple) == (b.flags & kTuple) &&
      !(a.flags & kGen) && !(b.flags & kGen)) {
    const auto& x = *a.list;
    const auto& y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!py_eq(x[k], y[k])) return py_lt(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  throw TypeErr(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) +
                "'");
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*e", p - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf: [-]d[.ddd]e[+-]XX
  std::string s(buf);
  bool neg = s[0] == '-';
  if (neg) s = s.substr(1);
  size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
      }
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

static bool py_isprintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F))
    return false;
  if (c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xD800 && c <= 0xF8FF)) return false;
  if (c == 0xFFFE || c == 0xFFFF || c > 0x10FFFF || (c >= 0xE0000 && c <= 0xE007F) || c >= 0xF0000) return false;
  return true;
}

std::string py_str_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (!py_isprintable(c)) {
      char buf[16];
      if (c < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += quote;
  return out;
}

static std::string repr_impl(const Val& v, bool top);

std::string to_str(const Val& v) { return repr_impl(v, true); }
std::string to_repr(const Val& v) { return repr_impl(v, false); }

static std::string repr_impl(const Val& v, bool top) {
  switch (v.kind) {
    case Kind::Undefined: return top ? std::string() : std::string("Undefined");
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return py_float_repr(v.f);
    case Kind::String: return top ? v.s : py_str_repr(v.s);
    case Kind::Seq: {
      if (v.flags & kGen) return "<generator object>";
      bool tuple = v.flags & kTuple;
      std::string out = tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += repr_impl((*v.list)[k], false);
      }
      if (tuple && v.list->size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Kind::Map: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : *v.dict) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(k) + ": " + repr_impl(x, false);
      }
      return out + "}";
    }
    case Kind::Callable: return "<function " + v.fn->name + ">";
    case Kind::Namespace: {
      Val d = Val::make_dict(v.ns->attrs);
      return "<Namespace " + repr_impl(d, false) + ">";
    }
    case Kind::Loop:
      return "<LoopContext " + std::to_string(v.loop->index0 + 1) + "/" + std::to_string(v.loop->items->size()) + ">";
  }
  return "";
}

Val from_json(const Value& j) {
  switch (j.type()) {
    case Value::value_t::null: return Val::none();
    case Value::value_t::boolean: return Val::boolean(j.get<bool>());
    case Value::value_t::number_integer: return Val::integer(j.get<int64_t>());
    case Value::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Val::real(static_cast<double>(u));
      return Val::integer(static_cast<int64_t>(u));
    }
    case Value::value_t::number_float: return Val::real(j.get<double>());
    case Value::value_t::string: return Val::str(j.get<std::string>());
    case Value::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(from_json(x));
      return Val::make_list(std::move(l));
    }
    case Value::value_t::object: {
      Dict d;
      d.reserve(j.size());
      for (const auto& [k, x] : j.items()) d.emplace_back(k, from_json(x));
      return Val::make_dict(std::move(d));
    }
    default: return Val::none();
  }
}

Value to_json(const Val& v) {
  switch (v.kind) {
    case Kind::None: return nullptr;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i;
    case Kind::Float: return v.f;
    case Kind::String: return v.s;
    case Kind::Seq: {
      if (v.flags & kGen) break;
      Value a = Value::array();
      for (const auto& x : *v.list) a.push_back(to_json(x));
      return a;
    }
    case Kind::Map: {
      Value o = Value::object();
      for (const auto& [k, x] : *v.dict) o[k] = to_json(x);
      return o;
    }
    default: break;
  }
  throw TypeErr(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
}

static void json_escape(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  auto esc = [&](char32_t c) {
    switch (c) {
      case '"': out += "\\\""; return true;
      case '\\': out += "\\\\"; return true;
      case '\n': out += "\\n"; return true;
      case '\r': out += "\\r"; return true;
      case '\t': out += "\\t"; return true;
      case '\b': out += "\\b"; return true;
      case '\f': out += "\\f"; return true;
      default: return false;
    }
  };
  auto hex4 = [&](unsigned x) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", x & 0xFFFFu);
    out += buf;
  };
  if (!ensure_ascii) {
    for (char ch : s) {
      auto c = static_cast<unsigned char>(ch);
      if (esc(c)) continue;
      if (c < 0x20)
        hex4(c);
      else
        out += ch;
    }
  } else {
    for (char32_t c : utf8_decode(s)) {
      if (esc(c)) continue;
      if (c >= 0x20 && c < 0x7F) {
        out += static_cast<char>(c);
      } else if (c < 0x10000) {
        hex4(static_cast<unsigned>(c));
      } else {
        char32_t x = c - 0x10000;
        hex4(static_cast<unsigned>(0xD800 + (x >> 10)));
        hex4(static_cast<unsigned>(0xDC00 + (x & 0x3FF)));
      }
    }
  }
  out += '"';
}

static void dumps_impl(std::string& out, const Val& v, bool ensure_ascii, const std::string* indent,
                       const std::string& item_sep, const std::string& key_sep, bool sort_keys, int level) {
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f > 0 ? "Infinity" : "-Infinity";
      else
        out += py_float_repr(v.f);
      return;
    case Kind::String: json_escape(out, v.s, ensure_ascii); return;
    case Kind::Seq:
    case Kind::Map: {
      bool is_list = v.kind == Kind::Seq;
      if (is_list && (v.flags & kGen)) break;
      size_t n = is_list ? v.list->size() : v.dict->size();
      if (n == 0) {
        out += is_list ? "[]" : "{}";
        return;
      }
      out += is_list ? '[' : '{';
      std::string newline_indent;
      if (indent) {
        newline_indent = "\n";
        for (int k = 0; k <= level; ++k) newline_indent += *indent;
        out += newline_indent;
      }
      std::vector<const std::pair<std::string, Val>*> items;
      if (!is_list) {
        for (const auto& p : *v.dict) items.push_back(&p);
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      }
      for (size_t k = 0; k < n; ++k) {
        if (k) {
          out += item_sep;
          out += newline_indent;
        }
        if (is_list) {
          dumps_impl(out, (*v.list)[k], ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1);
        } else {
          json_escape(out, items[k]->first, ensure_ascii);
          out += key_sep;
          dumps_impl(out, items[k]->second, ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1);
        }
      }
      if (indent) {
        out += '\n';
        for (int k = 0; k < level; ++k) out += *indent;
      }
      out += is_list ? ']' : '}';
      return;
    }
    default: break;
  }
  throw TypeErr(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
}

std::string json_dumps(const Val& v, bool ensure_ascii, const std::string* indent, const std::string& item_sep,
                       const std::string& key_sep, bool sort_keys) {
  std::string out;
  dumps_impl(out, v, ensure_ascii, indent, item_sep, key_sep, sort_keys, 0);
  return out;
}

}  // namespace ft::jinja::detail

namespace ft::jinja {

std::string python_json_dumps(const Value& value, int indent, bool sort_keys) {
  using namespace detail;
  std::string ind(indent > 0 ? static_cast<size_t>(indent) : 0, ' ');
  return json_dumps(from_json(value), false, indent >= 0 ? &ind : nullptr, indent >= 0 ? "," : ", ", ": ",
                    sort_keys);
}

}  // namespace ft::jinja

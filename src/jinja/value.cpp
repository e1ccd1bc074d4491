// Python value semantics for ft::jinja: type names, truthiness, equality, ordering, iteration, str()/repr(), and
// the call-argument helpers of builtins.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/strings.h"

namespace ft::jinja::detail {

const char* type_name(const Val& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::Seq:
      return (v.flags & kGen) ? "generator" : (v.flags & kTuple) ? "tuple" : "list";
    case Kind::Map:
      return "dict";
    case Kind::Callable:
      return "function";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Loop:
      return "LoopContext";
  }
  return "object";
}

bool truthy(const Val& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return v.b;
    case Kind::Int:
      return v.i != 0;
    case Kind::Float:
      return v.f != 0.0;
    case Kind::String:
      return !v.s.empty();
    case Kind::Seq:
      return (v.flags & kGen) || !v.list->empty();
    case Kind::Map:
      return !v.dict->empty();
    default:
      return true;
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
    case Kind::None:
      return true;
    case Kind::String:
      return a.s == b.s;
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
      for (const auto& entry : *a.dict) {
        auto it = std::find_if(b.dict->begin(), b.dict->end(), [&](const auto& p) { return p.first == entry.first; });
        if (it == b.dict->end() || !py_eq(entry.second, it->second)) return false;
      }
      return true;
    }
    case Kind::Callable:
      return a.fn == b.fn;
    case Kind::Namespace:
      return a.ns == b.ns;
    case Kind::Loop:
      return a.loop == b.loop;
    default:
      return false;
  }
}

bool py_lt(const Val& a, const Val& b) {
  if (a.is_num() && b.is_num()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_str() && b.is_str()) return a.s < b.s;  // UTF-8 byte order == code point order
  if (a.kind == Kind::Seq && b.kind == Kind::Seq && (a.flags & kTuple) == (b.flags & kTuple) && !(a.flags & kGen) &&
      !(b.flags & kGen)) {
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
      append_utf8(out, c);
    }
  }
  out += quote;
  return out;
}

uint16_t nesting_depth(const List& items) {
  uint16_t deepest = 0;
  for (const auto& x : items) deepest = std::max(deepest, x.depth);
  if (deepest >= kMaxNesting)
    throw TypeErr("values nested more than " + std::to_string(kMaxNesting) + " levels deep are not supported");
  return static_cast<uint16_t>(deepest + 1);
}

uint16_t nesting_depth(const Dict& items) {
  uint16_t deepest = 0;
  for (const auto& kv : items) deepest = std::max(deepest, kv.second.depth);
  if (deepest >= kMaxNesting)
    throw TypeErr("values nested more than " + std::to_string(kMaxNesting) + " levels deep are not supported");
  return static_cast<uint16_t>(deepest + 1);
}

static std::string repr_impl(const Val& v, bool top);

std::string to_str(const Val& v) {
  return repr_impl(v, true);
}
std::string to_repr(const Val& v) {
  return repr_impl(v, false);
}

// The namespaces being printed, innermost last: one met again prints as {...}, as Python's recursion-guarded dict
// repr does for `ns.me = ns`; chains of namespaces (ns2.x = ns1, ...) stop at Python's recursion limit.
thread_local std::vector<const Namespace*> printing_namespaces;

static std::string repr_namespace(const Namespace& ns) {
  auto& printing = printing_namespaces;
  if (std::find(printing.begin(), printing.end(), &ns) != printing.end()) return "<Namespace {...}>";
  if (printing.size() >= 1000) throw TypeErr("maximum recursion depth exceeded while getting the repr of an object");
  printing.push_back(&ns);
  struct Pop {
    std::vector<const Namespace*>& stack;
    ~Pop() { stack.pop_back(); }
  } pop{printing};
  std::string out = "{";
  bool first = true;
  for (const auto& [k, x] : ns.attrs) {
    if (!first) out += ", ";
    first = false;
    out += py_str_repr(k) + ": " + repr_impl(x, false);
  }
  return "<Namespace " + out + "}>";
}

static std::string repr_impl(const Val& v, bool top) {
  switch (v.kind) {
    case Kind::Undefined:
      return top ? std::string() : std::string("Undefined");
    case Kind::None:
      return "None";
    case Kind::Bool:
      return v.b ? "True" : "False";
    case Kind::Int:
      return std::to_string(v.i);
    case Kind::Float:
      return py_float_repr(v.f);
    case Kind::String:
      return top ? v.s : py_str_repr(v.s);
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
    case Kind::Callable:
      return "<function " + v.fn->name + ">";
    case Kind::Namespace:
      return repr_namespace(*v.ns);
    case Kind::Loop:
      return "<LoopContext " + std::to_string(v.loop->index0 + 1) + "/" + std::to_string(v.loop->items->size()) + ">";
  }
  return "";
}

std::vector<Val> iterate(const Val& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return {};
    case Kind::Seq:
      return *v.list;
    case Kind::Map: {
      std::vector<Val> out;
      for (const auto& [k, x] : *v.dict) out.push_back(Val::str(k));
      return out;
    }
    case Kind::String: {
      std::vector<Val> out;
      for (char32_t c : utf8_decode(v.s)) {
        std::string s;
        append_utf8(s, c);
        out.push_back(Val::str(std::move(s)));
      }
      return out;
    }
    case Kind::Loop:
      return *v.loop->items;
    default:
      break;
  }
  throw TypeErr(std::string("'") + type_name(v) + "' object is not iterable");
}

// ------------------------------------------------------------------------------------------------ call arguments

const Val* arg(const CallArgs& a, size_t idx, const char* name) {
  if (idx < a.pos.size()) return &a.pos[idx];
  if (name != nullptr)
    for (const auto& [k, v] : a.kw)
      if (k == name) return &v;
  return nullptr;
}

bool arg_bool(const CallArgs& a, size_t idx, const char* name, bool dflt) {
  const Val* v = arg(a, idx, name);
  return v ? truthy(*v) : dflt;
}

int64_t arg_int(const CallArgs& a, size_t idx, const char* name, int64_t dflt) {
  const Val* v = arg(a, idx, name);
  if (!v || v->kind == Kind::None) return dflt;
  if (!v->is_intlike())
    throw TypeErr(std::string("'") + type_name(*v) + "' object cannot be interpreted as an integer");
  return v->as_int();
}

const std::string& need_str(const Val& v, const char* what) {
  if (!v.is_str()) throw TypeErr(std::string(what) + " must be str, not " + type_name(v));
  return v.s;
}

}  // namespace ft::jinja::detail

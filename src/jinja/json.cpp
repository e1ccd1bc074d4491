// JSON for ft::jinja: values from and to nlohmann::json, and json.dumps as Python writes it.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/strings.h"

namespace ft::jinja::detail {

// `depth`: the arrays and objects around j; deeper than kMaxNesting is refused before the recursion goes on.
static Val from_json_at(const Value& j, int depth) {
  if (depth > kMaxNesting) {
    throw TypeErr("values nested more than " + std::to_string(kMaxNesting) + " levels deep are not supported");
  }
  switch (j.type()) {
    case Value::value_t::null:
      return Val::none();
    case Value::value_t::boolean:
      return Val::boolean(j.get<bool>());
    case Value::value_t::number_integer:
      return Val::integer(j.get<int64_t>());
    case Value::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Val::real(static_cast<double>(u));
      return Val::integer(static_cast<int64_t>(u));
    }
    case Value::value_t::number_float:
      return Val::real(j.get<double>());
    case Value::value_t::string:
      return Val::str(j.get<std::string>());
    case Value::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(from_json_at(x, depth + 1));
      return Val::make_list(std::move(l));
    }
    case Value::value_t::object: {
      Dict d;
      d.reserve(j.size());
      for (const auto& [k, x] : j.items()) d.emplace_back(k, from_json_at(x, depth + 1));
      return Val::make_dict(std::move(d));
    }
    default:
      return Val::none();
  }
}

Val from_json(const Value& j) {
  return from_json_at(j, 0);
}

Value to_json(const Val& v) {
  switch (v.kind) {
    case Kind::None:
      return nullptr;
    case Kind::Bool:
      return v.b;
    case Kind::Int:
      return v.i;
    case Kind::Float:
      return v.f;
    case Kind::String:
      return v.s;
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
    default:
      break;
  }
  throw TypeErr(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
}

static void json_escape(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  auto esc = [&](char32_t c) {
    switch (c) {
      case '"':
        out += "\\\"";
        return true;
      case '\\':
        out += "\\\\";
        return true;
      case '\n':
        out += "\\n";
        return true;
      case '\r':
        out += "\\r";
        return true;
      case '\t':
        out += "\\t";
        return true;
      case '\b':
        out += "\\b";
        return true;
      case '\f':
        out += "\\f";
        return true;
      default:
        return false;
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
                       const std::string& item_sep, const std::string& key_sep, bool sort_keys, int level,
                       size_t max_bytes);

// A list (not a generator) or a dict at nesting `level`: its items, one per line when indenting.
static void dumps_container(std::string& out, const Val& v, bool ensure_ascii, const std::string* indent,
                            const std::string& item_sep, const std::string& key_sep, bool sort_keys, int level,
                            size_t max_bytes) {
  bool is_list = v.kind == Kind::Seq;
  size_t n = is_list ? v.list->size() : v.dict->size();
  if (n == 0) {
    out += is_list ? "[]" : "{}";
    return;
  }
  out += is_list ? '[' : '{';
  std::string newline_indent;
  if (indent) {
    check_result_size(static_cast<uint64_t>(level) + 1, indent->size(), max_bytes);
    newline_indent = "\n";
    for (int k = 0; k <= level; ++k) newline_indent += *indent;
    out += newline_indent;
  }
  std::vector<const std::pair<std::string, Val>*> items;
  if (!is_list) {
    for (const auto& p : *v.dict) items.push_back(&p);
    if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
  }
  for (size_t k = 0; k < n; ++k) {
    if (k) {
      out += item_sep;
      out += newline_indent;
    }
    if (is_list) {
      dumps_impl(out, (*v.list)[k], ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1, max_bytes);
    } else {
      json_escape(out, items[k]->first, ensure_ascii);
      out += key_sep;
      dumps_impl(out, items[k]->second, ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1, max_bytes);
    }
  }
  if (indent) {
    out += '\n';
    for (int k = 0; k < level; ++k) out += *indent;
  }
  out += is_list ? ']' : '}';
}

static void dumps_impl(std::string& out, const Val& v, bool ensure_ascii, const std::string* indent,
                       const std::string& item_sep, const std::string& key_sep, bool sort_keys, int level,
                       size_t max_bytes) {
  check_result_size(out.size(), 1, max_bytes);
  switch (v.kind) {
    case Kind::None:
      out += "null";
      return;
    case Kind::Bool:
      out += v.b ? "true" : "false";
      return;
    case Kind::Int:
      out += std::to_string(v.i);
      return;
    case Kind::Float:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f > 0 ? "Infinity" : "-Infinity";
      else
        out += py_float_repr(v.f);
      return;
    case Kind::String:
      json_escape(out, v.s, ensure_ascii);
      return;
    case Kind::Seq:
    case Kind::Map:
      if (v.kind == Kind::Seq && (v.flags & kGen)) break;
      dumps_container(out, v, ensure_ascii, indent, item_sep, key_sep, sort_keys, level, max_bytes);
      return;
    default:
      break;
  }
  throw TypeErr(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
}

std::string json_dumps(const Val& v, bool ensure_ascii, const std::string* indent, const std::string& item_sep,
                       const std::string& key_sep, bool sort_keys, size_t max_bytes) {
  std::string out;
  dumps_impl(out, v, ensure_ascii, indent, item_sep, key_sep, sort_keys, 0, max_bytes);
  check_result_size(out.size(), 1, max_bytes);
  return out;
}

}  // namespace ft::jinja::detail

namespace ft::jinja {

std::string python_json_dumps(const Value& value, int indent, bool sort_keys) {
  using namespace detail;
  std::string ind(indent > 0 ? static_cast<size_t>(indent) : 0, ' ');
  try {
    return json_dumps(from_json(value), false, indent >= 0 ? &ind : nullptr, indent >= 0 ? "," : ", ", ": ", sort_keys);
  } catch (const TypeErr& e) {
    throw ft::Error(std::string("json.dumps: ") + e.what());
  }
}

}  // namespace ft::jinja

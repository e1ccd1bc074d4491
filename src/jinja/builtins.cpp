// Builtins of ft::jinja: call-argument helpers, Python iteration, `in` and %-formatting, transformers' globals.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "jinja/builtins_internal.h"

// percent_format and strftime_now pass template-provided format strings to snprintf/strftime on purpose.
#pragma GCC diagnostic ignored "-Wformat-nonliteral"

namespace ft::jinja::detail {

// ------------------------------------------------------------------------------------------------ arguments

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

// ------------------------------------------------------------------------------------------------ shared

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

Val py_in(const Val& item, const Val& c) {
  switch (c.kind) {
    case Kind::Undefined:
      return Val::boolean(false);
    case Kind::String:
      if (!item.is_str())
        throw TypeErr(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      return Val::boolean(c.s.find(item.s) != std::string::npos);
    case Kind::Seq:
      for (const Val& x : *c.list)
        if (py_eq(x, item)) return Val::boolean(true);
      return Val::boolean(false);
    case Kind::Map:
      if (item.kind == Kind::Seq && !(item.flags & kTuple)) throw TypeErr("unhashable type: 'list'");
      if (item.kind == Kind::Map) throw TypeErr("unhashable type: 'dict'");
      if (!item.is_str()) return Val::boolean(false);
      for (const auto& [k, x] : *c.dict)
        if (k == item.s) return Val::boolean(true);
      return Val::boolean(false);
    default:
      break;
  }
  throw TypeErr(std::string("argument of type '") + type_name(c) + "' is not iterable");
}

// Whether a number formatted with `spec` ("%" flags width .precision) fits percent_format's 512-byte buffer:
// width <= 400 and precision <= 100 (a double's integer part has at most 309 digits).
static bool number_fits(const std::string& spec) {
  const size_t dot = spec.find('.');
  const size_t w = spec.find_first_of("123456789");
  const std::string width =
      w != std::string::npos && w < dot ? spec.substr(w, dot == std::string::npos ? dot : dot - w) : "";
  const std::string precision = dot != std::string::npos ? spec.substr(dot + 1) : "";
  return (width.empty() || (width.size() <= 3 && std::stoi(width) <= 400)) &&
         (precision.empty() || (precision.size() <= 3 && std::stoi(precision) <= 100));
}

Val percent_format(const std::string& fmt, const Val& argsv, size_t max_bytes) {
  std::vector<Val> args;
  bool mapping = argsv.kind == Kind::Map;
  if (argsv.kind == Kind::Seq && (argsv.flags & kTuple))
    args = *argsv.list;
  else
    args.push_back(argsv);
  size_t next = 0;
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    if (++k >= fmt.size()) throw TypeErr("incomplete format (ValueError)");
    const Val* v = nullptr;
    if (fmt[k] == '(') {
      size_t e = fmt.find(')', k);
      if (e == std::string::npos || !mapping) throw TypeErr("format requires a mapping");
      std::string key = fmt.substr(k + 1, e - k - 1);
      for (const auto& [kk, vv] : *argsv.dict)
        if (kk == key) v = &vv;
      if (!v) throw TypeErr("KeyError: " + py_str_repr(key));
      k = e + 1;
    }
    std::string spec = "%";
    // (strchr also finds the terminating NUL: a NUL byte in the template must not reach snprintf's format.)
    while (k < fmt.size() && fmt[k] != '\0' && std::strchr("-+ 0#", fmt[k]) != nullptr) spec += fmt[k++];
    while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) spec += fmt[k++];
    if (k < fmt.size() && fmt[k] == '.') {
      spec += fmt[k++];
      while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) spec += fmt[k++];
    }
    if (k >= fmt.size()) throw TypeErr("incomplete format (ValueError)");
    char conv = fmt[k];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!v) {
      if (mapping && args.size() == 1) {
        v = &args[0];
      } else {
        if (next >= args.size()) throw TypeErr("not enough arguments for format string");
        v = &args[next++];
      }
    }
    char buf[512];
    if (conv == 's' || conv == 'r' || conv == 'a') {
      std::u32string s = utf8_decode(conv == 's' ? to_str(*v) : to_repr(*v));
      size_t dot = spec.find('.');
      if (dot != std::string::npos) s = s.substr(0, static_cast<size_t>(std::atoll(spec.c_str() + dot + 1)));
      size_t wstart = spec.find_first_of("123456789");
      size_t width = (wstart != std::string::npos && (dot == std::string::npos || wstart < dot))
                         ? static_cast<size_t>(std::atoll(spec.c_str() + wstart))
                         : 0;
      std::string body = utf8_encode(s);
      check_result_size(width, 1, max_bytes);
      std::string pad(width > s.size() ? width - s.size() : 0, ' ');
      out += spec.find('-') != std::string::npos ? body + pad : pad + body;
    } else if (!number_fits(spec)) {
      throw TypeErr("format width over 400 or precision over 100 is not supported for numbers: " + spec + conv);
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v->is_num())
        throw TypeErr(std::string("%") + conv + " format: a real number is required, not " + type_name(*v));
      long long x = v->kind == Kind::Float ? static_cast<long long>(std::trunc(v->f)) : v->as_int();
      spec += "ll";
      spec += conv == 'i' ? 'd' : conv;
      std::snprintf(buf, sizeof buf, spec.c_str(), x);
      out += buf;
    } else if (conv != '\0' && std::strchr("fFeEgG", conv) != nullptr) {
      if (!v->is_num()) throw TypeErr(std::string("must be real number, not ") + type_name(*v));
      spec += conv;
      std::snprintf(buf, sizeof buf, spec.c_str(), v->as_double());
      out += buf;
    } else {
      throw TypeErr(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (!mapping && next != args.size()) throw TypeErr("not all arguments converted during string formatting");
  return Val::str(std::move(out));
}

std::unordered_map<std::string, Val> make_globals(const RenderOptions& opts) {
  std::unordered_map<std::string, Val> g;
  auto add = [&](const std::string& name, std::function<Val(Renderer&, CallArgs&, int)> fn) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->fn = std::move(fn);
    Val v;
    v.kind = Kind::Callable;
    v.fn = std::move(c);
    g[name] = v;
  };
  add("raise_exception", [](Renderer&, CallArgs& a, int) -> Val {
    const Val* m = arg(a, 0, "message");
    throw TemplateRaised(m ? to_str(*m) : std::string());
  });
  std::optional<std::time_t> now = opts.now;
  add("strftime_now", [now](Renderer& r, CallArgs& a, int line) -> Val {
    const Val* f = arg(a, 0, "format");
    if (!f || !f->is_str()) r.fail(line, "strftime_now() needs a format string");
    std::time_t t = now ? *now : std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::string out(256 + f->s.size() * 8, '\0');
    size_t n = f->s.empty() ? 0 : std::strftime(out.data(), out.size(), f->s.c_str(), &tm);
    out.resize(n);
    return Val::str(out);
  });
  auto dict_from = [](CallArgs& a, bool is_namespace, Renderer& r, int line) {
    Dict d;
    auto put = [&](const std::string& k, const Val& v) {
      if (is_namespace && !k.empty() && k[0] == '_')
        r.fail(line, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got " +
                         py_str_repr(k) + ". Please rename the attribute. (SecurityError)");
      auto it = std::find_if(d.begin(), d.end(), [&](const auto& p) { return p.first == k; });
      if (it != d.end())
        it->second = v;
      else
        d.emplace_back(k, v);
    };
    if (a.pos.size() > 1) r.fail(line, "dict expected at most 1 argument");
    if (!a.pos.empty()) {
      const Val& src = a.pos[0];
      if (src.kind == Kind::Map) {
        for (const auto& [k, v] : *src.dict) put(k, v);
      } else if (src.kind == Kind::Namespace) {
        for (const auto& [k, v] : src.ns->attrs) put(k, v);
      } else {
        for (const Val& pair : iterate(src)) {
          auto kv = iterate(pair);
          if (kv.size() != 2 || !kv[0].is_str()) r.fail(line, "dict() needs (str key, value) pairs");
          put(kv[0].s, kv[1]);
        }
      }
    }
    for (auto& [k, v] : a.kw) put(k, v);
    return d;
  };
  add("namespace", [dict_from](Renderer& r, CallArgs& a, int line) -> Val {
    Val v;
    v.kind = Kind::Namespace;
    v.ns = r.new_namespace();
    v.ns->attrs = dict_from(a, true, r, line);
    v.depth = nesting_depth(v.ns->attrs);
    return v;
  });
  add("dict",
      [dict_from](Renderer& r, CallArgs& a, int line) -> Val { return Val::make_dict(dict_from(a, false, r, line)); });
  add("range", [](Renderer& r, CallArgs& a, int line) -> Val {
    for (const Val& x : a.pos)
      if (!x.is_intlike())
        r.fail(line, std::string("'") + type_name(x) + "' object cannot be interpreted as an integer");
    int64_t start = 0, stop = 0, stp = 1;
    if (a.pos.size() == 1) {
      stop = a.pos[0].as_int();
    } else if (a.pos.size() >= 2) {
      start = a.pos[0].as_int();
      stop = a.pos[1].as_int();
      if (a.pos.size() >= 3) stp = a.pos[2].as_int();
    } else {
      r.fail(line, "range expected at least 1 argument, got 0");
    }
    if (stp == 0) r.fail(line, "range() arg 3 must not be zero");
    List out;
    for (int64_t k = start; stp > 0 ? k < stop : k > stop; k += stp) {
      if (out.size() >= 100000)
        r.fail(line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.push_back(Val::integer(k));
    }
    return Val::make_list(std::move(out));
  });
  return g;
}

const void* find_filter(const std::string& name) {
  return filter_entry(name);
}
const void* find_test(const std::string& name) {
  return test_entry(name);
}
bool is_unsupported_global(const std::string& name) {
  return name == "cycler" || name == "joiner" || name == "lipsum" || name == "self";
}

}  // namespace ft::jinja::detail

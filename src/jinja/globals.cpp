// The globals of ft::jinja's templates: jinja2's range, dict and namespace, and the raise_exception and
// strftime_now that transformers adds; and the jinja2 globals that are not supported.
#include <algorithm>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>

#include "jinja/render.h"

// strftime_now passes the template's format string to strftime on purpose.
#pragma GCC diagnostic ignored "-Wformat-nonliteral"

namespace ft::jinja::detail {
namespace {

// g_x is the global x.

Val g_raise_exception(Renderer&, CallArgs& a, int) {
  const Val* m = arg(a, 0, "message");
  throw TemplateRaised(m ? to_str(*m) : std::string());
}

// strftime_now(format): the time `now` (the clock when unset) in the local time zone.
Val g_strftime_now(const std::optional<std::time_t>& now, Renderer& r, CallArgs& a, int line) {
  const Val* f = arg(a, 0, "format");
  if (!f || !f->is_str()) r.fail(line, "strftime_now() needs a format string");
  std::time_t t = now ? *now : std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string out(256 + f->s.size() * 8, '\0');
  size_t n = f->s.empty() ? 0 : std::strftime(out.data(), out.size(), f->s.c_str(), &tm);
  out.resize(n);
  return Val::str(out);
}

// The items of dict(...) or namespace(...): from a mapping, a namespace or (key, value) pairs, then the keyword
// arguments; a namespace refuses underscore-prefixed names as transformers' sandbox does.
Dict dict_from(CallArgs& a, bool is_namespace, Renderer& r, int line) {
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
}

Val g_namespace(Renderer& r, CallArgs& a, int line) {
  Val v;
  v.kind = Kind::Namespace;
  v.ns = r.new_namespace();
  v.ns->attrs = dict_from(a, true, r, line);
  v.depth = nesting_depth(v.ns->attrs);
  return v;
}

Val g_dict(Renderer& r, CallArgs& a, int line) {
  return Val::make_dict(dict_from(a, false, r, line));
}

// range(stop) / range(start, stop[, step]), at most 100000 items as jinja2's sandbox allows.
Val g_range(Renderer& r, CallArgs& a, int line) {
  for (const Val& x : a.pos)
    if (!x.is_intlike()) r.fail(line, std::string("'") + type_name(x) + "' object cannot be interpreted as an integer");
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
    if (out.size() >= 100000) r.fail(line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.push_back(Val::integer(k));
  }
  return Val::make_list(std::move(out));
}

}  // namespace

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
  add("raise_exception", g_raise_exception);
  std::optional<std::time_t> now = opts.now;
  add("strftime_now", [now](Renderer& r, CallArgs& a, int line) { return g_strftime_now(now, r, a, line); });
  add("namespace", g_namespace);
  add("dict", g_dict);
  add("range", g_range);
  return g;
}

bool is_unsupported_global(const std::string& name) {
  return name == "cycler" || name == "joiner" || name == "lipsum" || name == "self";
}

}  // namespace ft::jinja::detail

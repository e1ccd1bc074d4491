// jinja2's filters on strings and numbers for ft::jinja (trim, replace, escape, int, float, round, tojson,
// indent, format, ...); filters.cpp lists them by name.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/filters.h"
#include "jinja/strings.h"

namespace ft::jinja::detail {

Val f_trim(Renderer&, const Val& v, CallArgs& a, int) {
  return Val::str(strip(to_str(v), arg(a, 0, "chars"), true, true));
}
Val f_upper(Renderer&, const Val& v, CallArgs&, int) {
  return Val::str(map_chars(to_str(v), py_upper));
}
Val f_lower(Renderer&, const Val& v, CallArgs&, int) {
  return Val::str(map_chars(to_str(v), py_lower));
}
Val f_capitalize(Renderer&, const Val& v, CallArgs&, int) {
  return Val::str(py_capitalize(to_str(v)));
}
Val f_title(Renderer&, const Val& v, CallArgs&, int) {
  return Val::str(jinja_title(to_str(v)));
}
Val f_string(Renderer&, const Val& v, CallArgs&, int) {
  Val r = Val::str(to_str(v));
  if (v.is_str()) r.flags = v.flags & kMarkup;
  return r;
}
Val f_safe(Renderer&, const Val& v, CallArgs&, int) {
  Val r = Val::str(to_str(v));
  r.flags = kMarkup;
  return r;
}
Val f_escape(Renderer&, const Val& v, CallArgs&, int) {
  if (v.is_str() && (v.flags & kMarkup)) return v;
  Val r = Val::str(html_escape(to_str(v)));
  r.flags = kMarkup;
  return r;
}
Val f_forceescape(Renderer&, const Val& v, CallArgs&, int) {
  Val r = Val::str(html_escape(to_str(v)));
  r.flags = kMarkup;
  return r;
}

Val f_replace(Renderer&, const Val& v, CallArgs& a, int) {
  const Val* o = arg(a, 0, "old");
  const Val* n = arg(a, 1, "new");
  if (!o || !n) throw TypeErr("replace() needs old and new");
  return Val::str(replace(to_str(v), to_str(*o), to_str(*n), arg_int(a, 2, "count", -1)));
}

namespace {

bool parse_py_int(std::string s, int base, int64_t& out) {
  s = strip(s, nullptr, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return false;
  size_t k = 0;
  if (s[0] == '+' || s[0] == '-') k = 1;
  if (k >= s.size()) return false;
  for (size_t j = k; j < s.size(); ++j)
    if (!std::isalnum(static_cast<unsigned char>(s[j]))) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, base);
  if (errno != 0 || end == nullptr || *end != '\0') return false;
  out = v;
  return true;
}

bool parse_py_float(const std::string& s0, double& out) {
  std::string s = strip(s0, nullptr, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return false;
  std::string low = map_chars(s, py_lower);
  std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    out = body == "nan" ? NAN : (low[0] == '-' ? -INFINITY : INFINITY);
    return true;
  }
  if (low.find_first_not_of("0123456789+-.e") != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end != nullptr && *end == '\0';
}

}  // namespace

Val f_int(Renderer&, const Val& v, CallArgs& a, int) {
  const Val* d = arg(a, 0, "default");
  int64_t base = arg_int(a, 1, "base", 10);
  Val dflt = d ? *d : Val::integer(0);
  switch (v.kind) {
    case Kind::Undefined:
      throw TypeErr(v.s + " (UndefinedError)");
    case Kind::Bool:
    case Kind::Int:
      return Val::integer(v.as_int());
    case Kind::Float:
      if (std::isnan(v.f) || std::isinf(v.f)) throw TypeErr("cannot convert float NaN/infinity to integer");
      return Val::integer(static_cast<int64_t>(std::trunc(v.f)));
    case Kind::String: {
      int64_t x;
      if (parse_py_int(v.s, static_cast<int>(base), x)) return Val::integer(x);
      double fl;
      if (parse_py_float(v.s, fl) && std::isfinite(fl)) return Val::integer(static_cast<int64_t>(std::trunc(fl)));
      return dflt;
    }
    default:
      return dflt;
  }
}

Val f_float(Renderer&, const Val& v, CallArgs& a, int) {
  const Val* d = arg(a, 0, "default");
  Val dflt = d ? *d : Val::real(0.0);
  switch (v.kind) {
    case Kind::Undefined:
      throw TypeErr(v.s + " (UndefinedError)");
    case Kind::Bool:
    case Kind::Int:
    case Kind::Float:
      return Val::real(v.as_double());
    case Kind::String: {
      double x;
      if (parse_py_float(v.s, x)) return Val::real(x);
      return dflt;
    }
    default:
      return dflt;
  }
}

Val f_abs(Renderer&, const Val& v, CallArgs&, int) {
  if (v.kind == Kind::Float) return Val::real(std::fabs(v.f));
  if (v.is_intlike()) return Val::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  throw TypeErr(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

Val f_round(Renderer&, const Val& v, CallArgs& a, int) {
  int64_t prec = arg_int(a, 0, "precision", 0);
  const Val* m = arg(a, 1, "method");
  std::string method = m ? to_str(*m) : "common";
  if (!v.is_num()) throw TypeErr(std::string("type ") + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_intlike()) return Val::integer(v.as_int());
    if (prec < 0 || prec > 300) throw TypeErr("unsupported round precision");
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), v.f);
    return Val::real(std::strtod(buf, nullptr));
  }
  if (method != "ceil" && method != "floor") throw TypeErr("method must be 'common', 'ceil' or 'floor'");
  double p = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_double() * p;
  return Val::real((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Val f_tojson(Renderer& r, const Val& v, CallArgs& a, int) {
  const size_t limit = r.options().max_output_bytes;
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  bool ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  const Val* ind = arg(a, 1, "indent");
  const Val* seps = arg(a, 2, "separators");
  bool sort_keys = arg_bool(a, 3, "sort_keys", false);
  std::string indent;
  bool has_indent = ind && ind->kind != Kind::None;
  if (has_indent) {
    if (ind->is_intlike() && ind->as_int() > 0) check_result_size(static_cast<uint64_t>(ind->as_int()), 1, limit);
    if (ind->is_intlike())
      indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ind->as_int())), ' ');
    else if (ind->is_str())
      indent = ind->s;
    else
      throw TypeErr("tojson indent must be an int or a string");
  }
  std::string item_sep = has_indent ? "," : ", ", key_sep = ": ";
  if (seps && seps->kind != Kind::None) {
    if (seps->kind != Kind::Seq || seps->list->size() != 2 || !(*seps->list)[0].is_str() || !(*seps->list)[1].is_str())
      throw TypeErr("tojson separators must be a (item_separator, key_separator) pair of strings");
    item_sep = (*seps->list)[0].s;
    key_sep = (*seps->list)[1].s;
  }
  return Val::str(json_dumps(v, ensure_ascii, has_indent ? &indent : nullptr, item_sep, key_sep, sort_keys, limit));
}

Val f_indent(Renderer& r, const Val& v, CallArgs& a, int) {
  const Val* w = arg(a, 0, "width");
  const size_t limit = r.options().max_output_bytes;
  if (w && !w->is_str()) check_result_size(static_cast<uint64_t>(std::max<int64_t>(0, w->as_int())), 1, limit);
  bool first = arg_bool(a, 1, "first", false);
  bool blank = arg_bool(a, 2, "blank", false);
  std::string ind = w ? (w->is_str() ? w->s : std::string(static_cast<size_t>(std::max<int64_t>(0, w->as_int())), ' '))
                      : std::string(4, ' ');
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines = splitlines(s, false);
  check_result_size(lines.size() + 1, ind.size(), limit);
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? lines[k] : ind + lines[k]);
  }
  if (first) rv = ind + rv;
  return Val::str(rv);
}

Val f_wordcount(Renderer&, const Val& v, CallArgs&, int) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : U(to_str(v))) {
    bool w = py_isalnum(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Val::integer(n);
}

Val f_format(Renderer& r, const Val& v, CallArgs& a, int) {
  if (!a.kw.empty() && !a.pos.empty()) throw TypeErr("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    Dict d(a.kw.begin(), a.kw.end());
    return percent_format(to_str(v), Val::make_dict(std::move(d)), r.options().max_output_bytes);
  }
  return percent_format(to_str(v), Val::make_list(a.pos, kTuple), r.options().max_output_bytes);
}

Val f_center(Renderer& r, const Val& v, CallArgs& a, int) {
  int64_t width = arg_int(a, 0, "width", 80);
  if (width > 0) check_result_size(static_cast<uint64_t>(width), 1, r.options().max_output_bytes);
  std::u32string u = U(to_str(v));
  if (width <= static_cast<int64_t>(u.size())) return Val::str(S(u));
  size_t marg = static_cast<size_t>(width) - u.size();
  size_t left = marg / 2 + (marg & static_cast<size_t>(width) & 1);
  return Val::str(std::string(left, ' ') + S(u) + std::string(marg - left, ' '));
}

}  // namespace ft::jinja::detail

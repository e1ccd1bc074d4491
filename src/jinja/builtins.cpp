// Builtins of ft::jinja: jinja2's filters and tests, Python str/dict/list methods, transformers' globals.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "jinja/render.h"

// percent_format and strftime_now pass template-provided format strings to snprintf/strftime on purpose.
#pragma GCC diagnostic ignored "-Wformat-nonliteral"

namespace ft::jinja::detail {
namespace {

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
  if (!v->is_intlike()) throw TypeErr(std::string("'") + type_name(*v) + "' object cannot be interpreted as an integer");
  return v->as_int();
}

const std::string& need_str(const Val& v, const char* what) {
  if (!v.is_str())
    throw TypeErr(std::string(what) + " must be str, not " + type_name(v));
  return v.s;
}

// ------------------------------------------------------------------------------------------------ strings

std::u32string U(const std::string& s) { return utf8_decode(s); }
std::string S(const std::u32string& s) { return utf8_encode(s); }

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

bool is_cased(char32_t c) { return py_isupper(c) || py_islower(c); }

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
      if (k < u.size()) utf8_append(out, u[k]);
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
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Byte offset -> code point index.
int64_t cp_index(const std::string& s, size_t byte_off) { return static_cast<int64_t>(utf8_length(s.substr(0, byte_off))); }

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
      if (k + 1 < fmt.size() && fmt[k + 1] == '}') ++k;
      else throw TypeErr("Single '}' encountered in format string (ValueError)");
      out += '}';
    } else {
      out += c;
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------------------ helpers

Val lower_key(const Val& v, bool case_sensitive) {
  if (!case_sensitive && v.is_str()) return Val::str(map_chars(v.s, py_lower));
  return v;
}

// jinja2's make_attrgetter: "a.b.0" walks getitem for each part (integers as indices).
Val attr_path(Renderer& r, const Val& v, const std::string& path, int line) {
  Val cur = v;
  size_t i = 0;
  while (true) {
    size_t j = path.find('.', i);
    std::string part = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
    cur = r.getitem(cur, digits ? Val::integer(std::atoll(part.c_str())) : Val::str(part), line);
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return cur;
}

const FilterEntry* filter_entry(const std::string& name);
const TestEntry* test_entry(const std::string& name);

// select/reject/selectattr/rejectattr
Val select_impl(Renderer& r, const Val& seq, CallArgs& a, int line, bool attr_mode, bool want) {
  size_t off = 0;
  std::string attr;
  if (attr_mode) {
    const Val* av = arg(a, 0, nullptr);
    if (!av) throw TypeErr("selectattr/rejectattr need an attribute name");
    attr = to_str(*av);
    off = 1;
  }
  const TestEntry* test = nullptr;
  CallArgs targs;
  if (a.pos.size() > off) {
    std::string tname = to_str(a.pos[off]);
    test = test_entry(tname);
    if (!test) throw TypeErr("No test named '" + tname + "'");
    targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), a.pos.end());
    targs.kw = a.kw;
  }
  List out;
  for (const Val& item : iterate(seq)) {
    Val x = attr_mode ? attr_path(r, item, attr, line) : item;
    bool ok = test ? test->fn(r, x, targs, line) : truthy(x);
    if (ok == want) out.push_back(item);
  }
  return Val::make_list(std::move(out), kGen);
}

// ------------------------------------------------------------------------------------------------ filters

Val f_length(Renderer&, const Val& v, CallArgs&, int) {
  switch (v.kind) {
    case Kind::Undefined: return Val::integer(0);
    case Kind::String: return Val::integer(static_cast<int64_t>(utf8_length(v.s)));
    case Kind::Seq:
      if (v.flags & kGen) break;
      return Val::integer(static_cast<int64_t>(v.list->size()));
    case Kind::Map: return Val::integer(static_cast<int64_t>(v.dict->size()));
    case Kind::Loop: return Val::integer(static_cast<int64_t>(v.loop->items->size()));
    default: break;
  }
  throw TypeErr(std::string("object of type '") + type_name(v) + "' has no len()");
}

Val f_first(Renderer&, const Val& v, CallArgs&, int) {
  auto items = iterate(v);
  if (items.empty()) return Val::undef("No first item, sequence was empty.");
  return items.front();
}

Val f_last(Renderer&, const Val& v, CallArgs&, int) {
  if (v.kind == Kind::Seq && (v.flags & kGen)) throw TypeErr("'generator' object is not reversible");
  auto items = iterate(v);
  if (items.empty()) return Val::undef("No last item, sequence was empty.");
  return items.back();
}

Val f_join(Renderer& r, const Val& v, CallArgs& a, int line) {
  const Val* d = arg(a, 0, "d");
  const Val* attr = arg(a, 1, "attribute");
  std::string sep = d ? to_str(*d) : "";
  std::string out;
  bool first = true;
  for (const Val& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attr && attr->kind != Kind::None ? attr_path(r, item, to_str(*attr), line) : item);
  }
  return Val::str(std::move(out));
}

Val f_default(Renderer&, const Val& v, CallArgs& a, int) {
  const Val* d = arg(a, 0, "default_value");
  bool boolean = arg_bool(a, 1, "boolean", false);
  if (v.is_undef() || (boolean && !truthy(v))) return d ? *d : Val::str("");
  return v;
}

Val f_trim(Renderer&, const Val& v, CallArgs& a, int) { return Val::str(strip(to_str(v), arg(a, 0, "chars"), true, true)); }
Val f_upper(Renderer&, const Val& v, CallArgs&, int) { return Val::str(map_chars(to_str(v), py_upper)); }
Val f_lower(Renderer&, const Val& v, CallArgs&, int) { return Val::str(map_chars(to_str(v), py_lower)); }
Val f_capitalize(Renderer&, const Val& v, CallArgs&, int) { return Val::str(py_capitalize(to_str(v))); }
Val f_title(Renderer&, const Val& v, CallArgs&, int) { return Val::str(jinja_title(to_str(v))); }
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

Val f_list(Renderer&, const Val& v, CallArgs&, int) { return Val::make_list(iterate(v)); }

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

Val f_int(Renderer&, const Val& v, CallArgs& a, int) {
  const Val* d = arg(a, 0, "default");
  int64_t base = arg_int(a, 1, "base", 10);
  Val dflt = d ? *d : Val::integer(0);
  switch (v.kind) {
    case Kind::Undefined: throw TypeErr(v.s + " (UndefinedError)");
    case Kind::Bool:
    case Kind::Int: return Val::integer(v.as_int());
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
    default: return dflt;
  }
}

Val f_float(Renderer&, const Val& v, CallArgs& a, int) {
  const Val* d = arg(a, 0, "default");
  Val dflt = d ? *d : Val::real(0.0);
  switch (v.kind) {
    case Kind::Undefined: throw TypeErr(v.s + " (UndefinedError)");
    case Kind::Bool:
    case Kind::Int:
    case Kind::Float: return Val::real(v.as_double());
    case Kind::String: {
      double x;
      if (parse_py_float(v.s, x)) return Val::real(x);
      return dflt;
    }
    default: return dflt;
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

Val f_reverse(Renderer&, const Val& v, CallArgs&, int) {
  if (v.is_str()) {
    std::u32string u = U(v.s);
    std::reverse(u.begin(), u.end());
    return Val::str(S(u));
  }
  if (v.kind == Kind::Seq && (v.flags & kGen)) {
    List l = *v.list;
    std::reverse(l.begin(), l.end());
    return Val::make_list(std::move(l));
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Val::make_list(std::move(items), kGen);
}

Val f_sort(Renderer& r, const Val& v, CallArgs& a, int line) {
  bool rev = arg_bool(a, 0, "reverse", false);
  bool cs = arg_bool(a, 1, "case_sensitive", false);
  const Val* attr = arg(a, 2, "attribute");
  auto items = iterate(v);
  std::vector<std::pair<Val, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) {
    Val key = attr && attr->kind != Kind::None ? attr_path(r, items[k], to_str(*attr), line) : items[k];
    keyed.emplace_back(lower_key(key, cs), k);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return rev ? py_lt(y.first, x.first) : py_lt(x.first, y.first);
  });
  List out;
  for (auto& [key, k] : keyed) out.push_back(items[k]);
  return Val::make_list(std::move(out));
}

Val f_unique(Renderer& r, const Val& v, CallArgs& a, int line) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Val* attr = arg(a, 1, "attribute");
  List out, seen;
  for (const Val& item : iterate(v)) {
    Val key = lower_key(attr && attr->kind != Kind::None ? attr_path(r, item, to_str(*attr), line) : item, cs);
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const Val& s) { return py_eq(s, key); });
    if (!dup) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Val::make_list(std::move(out), kGen);
}

Val minmax(Renderer& r, const Val& v, CallArgs& a, int line, bool want_max) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Val* attr = arg(a, 1, "attribute");
  auto items = iterate(v);
  if (items.empty()) return Val::undef("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t k) {
    return lower_key(attr && attr->kind != Kind::None ? attr_path(r, items[k], to_str(*attr), line) : items[k], cs);
  };
  Val bk = key(0);
  for (size_t k = 1; k < items.size(); ++k) {
    Val kk = key(k);
    if (want_max ? py_lt(bk, kk) : py_lt(kk, bk)) {
      best = k;
      bk = kk;
    }
  }
  return items[best];
}
Val f_min(Renderer& r, const Val& v, CallArgs& a, int line) { return minmax(r, v, a, line, false); }
Val f_max(Renderer& r, const Val& v, CallArgs& a, int line) { return minmax(r, v, a, line, true); }

Val f_sum(Renderer& r, const Val& v, CallArgs& a, int line) {
  const Val* attr = arg(a, 0, "attribute");
  const Val* start = arg(a, 1, "start");
  Val acc = start ? *start : Val::integer(0);
  for (const Val& item : iterate(v)) {
    Val x = attr && attr->kind != Kind::None ? attr_path(r, item, to_str(*attr), line) : item;
    if (acc.is_intlike() && x.is_intlike()) {
      acc = Val::integer(acc.as_int() + x.as_int());
    } else if (acc.is_num() && x.is_num()) {
      acc = Val::real(acc.as_double() + x.as_double());
    } else {
      throw TypeErr(std::string("unsupported operand type(s) for +: '") + type_name(acc) + "' and '" + type_name(x) + "'");
    }
  }
  return acc;
}

Val f_items(Renderer&, const Val& v, CallArgs&, int) {
  if (v.is_undef()) return Val::make_list({}, kGen);
  if (v.kind != Kind::Map) throw TypeErr("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, x] : *v.dict) out.push_back(Val::make_list({Val::str(k), x}, kTuple));
  return Val::make_list(std::move(out), kGen);
}

Val f_dictsort(Renderer&, const Val& v, CallArgs& a, int) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Val* by = arg(a, 1, "by");
  bool rev = arg_bool(a, 2, "reverse", false);
  if (v.kind != Kind::Map) throw TypeErr("dictsort needs a mapping");
  int pos = 0;
  if (by) {
    std::string b = to_str(*by);
    if (b == "value") pos = 1;
    else if (b != "key") throw TypeErr("You can only sort by either \"key\" or \"value\" (FilterArgumentError)");
  }
  List items;
  for (const auto& [k, x] : *v.dict) items.push_back(Val::make_list({Val::str(k), x}, kTuple));
  std::stable_sort(items.begin(), items.end(), [&](const Val& x, const Val& y) {
    Val kx = lower_key((*x.list)[static_cast<size_t>(pos)], cs), ky = lower_key((*y.list)[static_cast<size_t>(pos)], cs);
    return rev ? py_lt(ky, kx) : py_lt(kx, ky);
  });
  return Val::make_list(std::move(items));
}

Val f_map(Renderer& r, const Val& v, CallArgs& a, int line) {
  List out;
  const Val* attr = arg(a, SIZE_MAX, "attribute");
  if (attr) {
    const Val* dflt = arg(a, SIZE_MAX, "default");
    for (const Val& item : iterate(v)) {
      Val x = attr_path(r, item, to_str(*attr), line);
      if (x.is_undef() && dflt) x = *dflt;
      out.push_back(x);
    }
    return Val::make_list(std::move(out), kGen);
  }
  if (a.pos.empty()) throw TypeErr("map requires a filter argument");
  std::string fname = to_str(a.pos[0]);
  const FilterEntry* fe = filter_entry(fname);
  if (!fe) throw TypeErr("No filter named '" + fname + "'");
  CallArgs fa;
  fa.pos.assign(a.pos.begin() + 1, a.pos.end());
  fa.kw = a.kw;
  for (const Val& item : iterate(v)) out.push_back(fe->fn(r, item, fa, line));
  return Val::make_list(std::move(out), kGen);
}

Val f_select(Renderer& r, const Val& v, CallArgs& a, int line) { return select_impl(r, v, a, line, false, true); }
Val f_reject(Renderer& r, const Val& v, CallArgs& a, int line) { return select_impl(r, v, a, line, false, false); }
Val f_selectattr(Renderer& r, const Val& v, CallArgs& a, int line) { return select_impl(r, v, a, line, true, true); }
Val f_rejectattr(Renderer& r, const Val& v, CallArgs& a, int line) { return select_impl(r, v, a, line, true, false); }

Val f_tojson(Renderer&, const Val& v, CallArgs& a, int) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  bool ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  const Val* ind = arg(a, 1, "indent");
  const Val* seps = arg(a, 2, "separators");
  bool sort_keys = arg_bool(a, 3, "sort_keys", false);
  std::string indent;
  bool has_indent = ind && ind->kind != Kind::None;
  if (has_indent) {
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
  return Val::str(json_dumps(v, ensure_ascii, has_indent ? &indent : nullptr, item_sep, key_sep, sort_keys));
}

Val f_indent(Renderer&, const Val& v, CallArgs& a, int) {
  const Val* w = arg(a, 0, "width");
  bool first = arg_bool(a, 1, "first", false);
  bool blank = arg_bool(a, 2, "blank", false);
  std::string ind = w ? (w->is_str() ? w->s : std::string(static_cast<size_t>(std::max<int64_t>(0, w->as_int())), ' '))
                      : std::string(4, ' ');
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines = splitlines(s, false);
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

Val f_format(Renderer&, const Val& v, CallArgs& a, int) {
  if (!a.kw.empty() && !a.pos.empty()) throw TypeErr("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    Dict d(a.kw.begin(), a.kw.end());
    return percent_format(to_str(v), Val::make_dict(std::move(d)));
  }
  return percent_format(to_str(v), Val::make_list(a.pos, kTuple));
}

Val f_center(Renderer&, const Val& v, CallArgs& a, int) {
  int64_t width = arg_int(a, 0, "width", 80);
  std::u32string u = U(to_str(v));
  if (width <= static_cast<int64_t>(u.size())) return Val::str(S(u));
  size_t marg = static_cast<size_t>(width) - u.size();
  size_t left = marg / 2 + (marg & static_cast<size_t>(width) & 1);
  return Val::str(std::string(left, ' ') + S(u) + std::string(marg - left, ' '));
}

const std::unordered_map<std::string, FilterEntry>& filters() {
  static const std::unordered_map<std::string, FilterEntry> m = {
      {"length", {f_length}},   {"count", {f_length}},       {"first", {f_first}},
      {"last", {f_last}},       {"join", {f_join}},           {"default", {f_default}},
      {"d", {f_default}},       {"trim", {f_trim}},           {"upper", {f_upper}},
      {"lower", {f_lower}},     {"capitalize", {f_capitalize}}, {"title", {f_title}},
      {"string", {f_string}},   {"safe", {f_safe}},           {"e", {f_escape}},
      {"escape", {f_escape}},   {"forceescape", {f_forceescape}}, {"replace", {f_replace}},
      {"list", {f_list}},       {"int", {f_int}},             {"float", {f_float}},
      {"abs", {f_abs}},         {"round", {f_round}},         {"reverse", {f_reverse}},
      {"sort", {f_sort}},       {"unique", {f_unique}},       {"min", {f_min}},
      {"max", {f_max}},         {"sum", {f_sum}},             {"items", {f_items}},
      {"dictsort", {f_dictsort}}, {"map", {f_map}},           {"select", {f_select}},
      {"reject", {f_reject}},   {"selectattr", {f_selectattr}}, {"rejectattr", {f_rejectattr}},
      {"tojson", {f_tojson}},   {"indent", {f_indent}},       {"wordcount", {f_wordcount}},
      {"format", {f_format}},   {"center", {f_center}},
  };
  return m;
}

const FilterEntry* filter_entry(const std::string& name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : &it->second;
}

// ------------------------------------------------------------------------------------------------ tests

const Val& targ(const CallArgs& a, const char* test) {
  if (a.pos.empty()) throw TypeErr(std::string("test '") + test + "' needs an argument");
  return a.pos[0];
}

Val py_mod(const Val& v, int64_t m) {
  if (!v.is_num()) throw TypeErr(std::string("unsupported operand type(s) for %: '") + type_name(v) + "' and 'int'");
  if (m == 0) throw TypeErr("integer division or modulo by zero (ZeroDivisionError)");
  if (v.kind == Kind::Float) {
    double r = std::fmod(v.f, static_cast<double>(m));
    if (r != 0 && ((r < 0) != (m < 0))) r += static_cast<double>(m);
    return Val::real(r);
  }
  int64_t r = v.as_int() % m;
  if (r != 0 && ((r < 0) != (m < 0))) r += m;
  return Val::integer(r);
}

bool t_defined(Renderer&, const Val& v, CallArgs&, int) { return !v.is_undef(); }
bool t_undefined(Renderer&, const Val& v, CallArgs&, int) { return v.is_undef(); }
bool t_none(Renderer&, const Val& v, CallArgs&, int) { return v.kind == Kind::None; }
bool t_string(Renderer&, const Val& v, CallArgs&, int) { return v.is_str(); }
bool t_number(Renderer&, const Val& v, CallArgs&, int) { return v.is_num(); }
bool t_integer(Renderer&, const Val& v, CallArgs&, int) { return v.kind == Kind::Int; }
bool t_float(Renderer&, const Val& v, CallArgs&, int) { return v.kind == Kind::Float; }
bool t_mapping(Renderer&, const Val& v, CallArgs&, int) { return v.kind == Kind::Map; }
bool t_iterable(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Undefined || v.is_str() || v.kind == Kind::Seq || v.kind == Kind::Map;
}
bool t_sequence(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Undefined || v.is_str() || (v.kind == Kind::Seq && !(v.flags & kGen)) || v.kind == Kind::Map;
}
bool t_boolean(Renderer&, const Val& v, CallArgs&, int) { return v.kind == Kind::Bool; }
bool t_true(Renderer&, const Val& v, CallArgs&, int) { return v.kind == Kind::Bool && v.b; }
bool t_false(Renderer&, const Val& v, CallArgs&, int) { return v.kind == Kind::Bool && !v.b; }
bool t_eq(Renderer&, const Val& v, CallArgs& a, int) { return py_eq(v, targ(a, "eq")); }
bool t_ne(Renderer&, const Val& v, CallArgs& a, int) { return !py_eq(v, targ(a, "ne")); }
void no_undef(const Val& x, const Val& y) {
  if (x.is_undef() || y.is_undef()) throw TypeErr((x.is_undef() ? x.s : y.s) + " (UndefinedError)");
}
bool t_lt(Renderer&, const Val& v, CallArgs& a, int) { no_undef(v, targ(a, "lt")); return py_lt(v, targ(a, "lt")); }
bool t_le(Renderer&, const Val& v, CallArgs& a, int) { no_undef(v, targ(a, "le")); return py_lt(v, targ(a, "le")) || py_eq(v, targ(a, "le")); }
bool t_gt(Renderer&, const Val& v, CallArgs& a, int) { no_undef(v, targ(a, "gt")); return py_lt(targ(a, "gt"), v); }
bool t_ge(Renderer&, const Val& v, CallArgs& a, int) { no_undef(v, targ(a, "ge")); return py_lt(targ(a, "ge"), v) || py_eq(v, targ(a, "ge")); }
bool t_odd(Renderer&, const Val& v, CallArgs&, int) { return py_eq(py_mod(v, 2), Val::integer(1)); }
bool t_even(Renderer&, const Val& v, CallArgs&, int) { return py_eq(py_mod(v, 2), Val::integer(0)); }
bool t_divisibleby(Renderer&, const Val& v, CallArgs& a, int) {
  const Val& n = targ(a, "divisibleby");
  if (!n.is_intlike()) throw TypeErr("divisibleby needs an integer");
  return py_eq(py_mod(v, n.as_int()), Val::integer(0));
}
bool t_in(Renderer&, const Val& v, CallArgs& a, int) { return truthy(py_in(v, targ(a, "in"))); }
bool t_lower(Renderer&, const Val& v, CallArgs&, int) {
  bool cased = false;
  for (char32_t c : U(to_str(v))) {
    if (py_isupper(c)) return false;
    if (py_islower(c)) cased = true;
  }
  return cased;
}
bool t_upper(Renderer&, const Val& v, CallArgs&, int) {
  bool cased = false;
  for (char32_t c : U(to_str(v))) {
    if (py_islower(c)) return false;
    if (py_isupper(c)) cased = true;
  }
  return cased;
}
bool t_callable(Renderer&, const Val& v, CallArgs&, int) { return v.kind == Kind::Callable || v.kind == Kind::Loop; }
bool t_sameas(Renderer&, const Val& v, CallArgs& a, int) {
  const Val& o = targ(a, "sameas");
  if (v.kind != o.kind) return false;
  switch (v.kind) {
    case Kind::None:
    case Kind::Undefined: return v.kind == Kind::None;
    case Kind::Bool: return v.b == o.b;
    case Kind::Int: return v.i == o.i && v.i >= -5 && v.i <= 256;
    case Kind::Seq: return v.list == o.list;
    case Kind::Map: return v.dict == o.dict;
    case Kind::Namespace: return v.ns == o.ns;
    case Kind::Callable: return v.fn == o.fn;
    default: return false;
  }
}
bool t_escaped(Renderer&, const Val& v, CallArgs&, int) { return v.is_str() && (v.flags & kMarkup); }
bool t_filter(Renderer&, const Val& v, CallArgs&, int) { return v.is_str() && filter_entry(v.s) != nullptr; }
bool t_test(Renderer&, const Val& v, CallArgs&, int) { return v.is_str() && test_entry(v.s) != nullptr; }

const std::unordered_map<std::string, TestEntry>& tests() {
  static const std::unordered_map<std::string, TestEntry> m = {
      {"defined", {t_defined}},   {"undefined", {t_undefined}}, {"none", {t_none}},
      {"string", {t_string}},     {"number", {t_number}},       {"integer", {t_integer}},
      {"float", {t_float}},       {"mapping", {t_mapping}},     {"iterable", {t_iterable}},
      {"sequence", {t_sequence}}, {"boolean", {t_boolean}},     {"true", {t_true}},
      {"false", {t_false}},       {"eq", {t_eq}},               {"equalto", {t_eq}},
      {"==", {t_eq}},             {"ne", {t_ne}},               {"!=", {t_ne}},
      {"lt", {t_lt}},             {"lessthan", {t_lt}},         {"<", {t_lt}},
      {"le", {t_le}},             {"<=", {t_le}},               {"gt", {t_gt}},
      {"greaterthan", {t_gt}},    {">", {t_gt}},                {"ge", {t_ge}},
      {">=", {t_ge}},             {"odd", {t_odd}},             {"even", {t_even}},
      {"divisibleby", {t_divisibleby}}, {"in", {t_in}},         {"lower", {t_lower}},
      {"upper", {t_upper}},       {"callable", {t_callable}},   {"sameas", {t_sameas}},
      {"escaped", {t_escaped}},   {"filter", {t_filter}},       {"test", {t_test}},
  };
  return m;
}

const TestEntry* test_entry(const std::string& name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : &it->second;
}

// ------------------------------------------------------------------------------------------------ methods

const std::unordered_set<std::string>& str_methods() {
  static const std::unordered_set<std::string> s = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower",
      "title", "capitalize", "replace", "find", "rfind", "index", "rindex", "count", "join", "format", "isdigit",
      "isalpha", "isalnum", "isspace", "isupper", "islower", "isnumeric", "isdecimal", "removeprefix",
      "removesuffix", "partition", "rpartition", "zfill", "ljust", "rjust", "center", "swapcase", "casefold"};
  return s;
}
const std::unordered_set<std::string>& dict_methods() {
  static const std::unordered_set<std::string> s = {"items", "keys", "values", "get", "copy"};
  return s;
}
const std::unordered_set<std::string>& list_methods() {
  static const std::unordered_set<std::string> s = {"index", "count", "copy"};
  return s;
}

bool matches_affix(const std::string& s, const Val& affix, bool prefix) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.kind == Kind::Seq && (affix.flags & kTuple)) {
    for (const Val& x : *affix.list)
      if (one(need_str(x, "startswith/endswith tuple item"))) return true;
    return false;
  }
  return one(need_str(affix, "startswith/endswith first arg"));
}

Val str_method(const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Val::str(strip(s, arg(a, 0, "chars"), name != "rstrip", name != "lstrip"));
  if (name == "split" || name == "rsplit")
    return Val::make_list(split(s, arg(a, 0, "sep"), arg_int(a, 1, "maxsplit", -1), name == "rsplit"));
  if (name == "splitlines") {
    List out;
    for (auto& l : splitlines(s, arg_bool(a, 0, "keepends", false))) out.push_back(Val::str(l));
    return Val::make_list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    const Val* x = arg(a, 0, nullptr);
    if (!x) throw TypeErr(name + "() takes at least 1 argument");
    if (a.pos.size() > 1) throw TypeErr(name + "() start/end arguments are not supported");
    return Val::boolean(matches_affix(s, *x, name == "startswith"));
  }
  if (name == "upper") return Val::str(map_chars(s, py_upper));
  if (name == "lower" || name == "casefold") return Val::str(map_chars(s, py_lower));
  if (name == "swapcase")
    return Val::str(map_chars(s, [](char32_t c) { return py_isupper(c) ? py_lower(c) : py_upper(c); }));
  if (name == "title") return Val::str(py_title(s));
  if (name == "capitalize") return Val::str(py_capitalize(s));
  if (name == "replace") {
    const Val* o = arg(a, 0, nullptr);
    const Val* n = arg(a, 1, nullptr);
    if (!o || !n) throw TypeErr("replace() needs old and new");
    return Val::str(replace(s, need_str(*o, "replace() arg 1"), need_str(*n, "replace() arg 2"), arg_int(a, 2, "count", -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const Val* x = arg(a, 0, nullptr);
    if (!x) throw TypeErr(name + "() takes at least 1 argument");
    const std::string& sub = need_str(*x, name.c_str());
    if (a.pos.size() > 1) throw TypeErr(name + "() start/end arguments are not supported");
    if (name == "count") {
      if (sub.empty()) return Val::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Val::integer(n);
    }
    size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") throw TypeErr("substring not found (ValueError)");
      return Val::integer(-1);
    }
    return Val::integer(cp_index(s, p));
  }
  if (name == "join") {
    const Val* x = arg(a, 0, nullptr);
    if (!x) throw TypeErr("join() takes exactly one argument");
    std::string out;
    size_t k = 0;
    for (const Val& item : iterate(*x)) {
      if (!item.is_str())
        throw TypeErr("sequence item " + std::to_string(k) + ": expected str instance, " + type_name(item) + " found");
      if (k++) out += s;
      out += item.s;
    }
    return Val::str(std::move(out));
  }
  if (name == "format") return Val::str(str_format(s, a));
  if (name.rfind("is", 0) == 0) {
    std::u32string u = U(s);
    if (u.empty()) return Val::boolean(false);
    if (name == "isupper" || name == "islower") {
      bool cased = false;
      for (char32_t c : u) {
        if (name == "isupper" ? py_islower(c) : py_isupper(c)) return Val::boolean(false);
        cased = cased || is_cased(c);
      }
      return Val::boolean(cased);
    }
    bool (*pred)(char32_t) = name == "isalpha" ? py_isalpha : name == "isalnum" ? py_isalnum
                             : name == "isspace" ? py_isspace : py_isdigit;
    return Val::boolean(std::all_of(u.begin(), u.end(), pred));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const Val* x = arg(a, 0, nullptr);
    if (!x) throw TypeErr(name + "() takes exactly one argument");
    const std::string& af = need_str(*x, name.c_str());
    if (name == "removeprefix" && s.compare(0, af.size(), af) == 0) return Val::str(s.substr(af.size()));
    if (name == "removesuffix" && !af.empty() && af.size() <= s.size() && s.compare(s.size() - af.size(), af.size(), af) == 0)
      return Val::str(s.substr(0, s.size() - af.size()));
    return Val::str(s);
  }
  if (name == "partition" || name == "rpartition") {
    const Val* x = arg(a, 0, nullptr);
    if (!x) throw TypeErr(name + "() takes exactly one argument");
    const std::string& sep = need_str(*x, name.c_str());
    if (sep.empty()) throw TypeErr("empty separator (ValueError)");
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos)
      return name == "partition" ? Val::make_list({Val::str(s), Val::str(""), Val::str("")}, kTuple)
                                 : Val::make_list({Val::str(""), Val::str(""), Val::str(s)}, kTuple);
    return Val::make_list({Val::str(s.substr(0, p)), Val::str(sep), Val::str(s.substr(p + sep.size()))}, kTuple);
  }
  if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
    int64_t width = arg_int(a, 0, nullptr, 0);
    const Val* fillv = arg(a, 1, nullptr);
    std::string fill = fillv ? need_str(*fillv, "fill character") : (name == "zfill" ? "0" : " ");
    size_t len = utf8_length(s);
    if (width <= static_cast<int64_t>(len)) return Val::str(s);
    size_t pad = static_cast<size_t>(width) - len;
    auto rep = [&](size_t n) {
      std::string r;
      for (size_t k = 0; k < n; ++k) r += fill;
      return r;
    };
    if (name == "ljust") return Val::str(s + rep(pad));
    if (name == "rjust") return Val::str(rep(pad) + s);
    if (name == "zfill") {
      if (!s.empty() && (s[0] == '+' || s[0] == '-')) return Val::str(s.substr(0, 1) + rep(pad) + s.substr(1));
      return Val::str(rep(pad) + s);
    }
    size_t left = pad / 2 + (pad & static_cast<size_t>(width) & 1);
    return Val::str(rep(left) + s + rep(pad - left));
  }
  throw TypeErr("unsupported str method '" + name + "'");
}

}  // namespace

// ------------------------------------------------------------------------------------------------ shared

std::vector<Val> iterate(const Val& v) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::Seq: return *v.list;
    case Kind::Map: {
      std::vector<Val> out;
      for (const auto& [k, x] : *v.dict) out.push_back(Val::str(k));
      return out;
    }
    case Kind::String: {
      std::vector<Val> out;
      for (char32_t c : utf8_decode(v.s)) {
        std::string s;
        utf8_append(s, c);
        out.push_back(Val::str(std::move(s)));
      }
      return out;
    }
    case Kind::Loop: return *v.loop->items;
    default: break;
  }
  throw TypeErr(std::string("'") + type_name(v) + "' object is not iterable");
}

Val py_in(const Val& item, const Val& c) {
  switch (c.kind) {
    case Kind::Undefined: return Val::boolean(false);
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
    default: break;
  }
  throw TypeErr(std::string("argument of type '") + type_name(c) + "' is not iterable");
}

Val percent_format(const std::string& fmt, const Val& argsv) {
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
    while (k < fmt.size() && std::strchr("-+ 0#", fmt[k]) != nullptr) spec += fmt[k++];
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
                         ? static_cast<size_t>(std::atoll(spec.c_str() + wstart)) : 0;
      std::string body = utf8_encode(s);
      std::string pad(width > s.size() ? width - s.size() : 0, ' ');
      out += spec.find('-') != std::string::npos ? body + pad : pad + body;
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v->is_num()) throw TypeErr(std::string("%") + conv + " format: a real number is required, not " + type_name(*v));
      long long x = v->kind == Kind::Float ? static_cast<long long>(std::trunc(v->f)) : v->as_int();
      spec += "ll";
      spec += conv == 'i' ? 'd' : conv;
      std::snprintf(buf, sizeof buf, spec.c_str(), x);
      out += buf;
    } else if (std::strchr("fFeEgG", conv) != nullptr) {
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

bool has_method(const Val& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::String: return str_methods().count(name) != 0;
    case Kind::Map: return dict_methods().count(name) != 0;
    case Kind::Seq: return !(obj.flags & kGen) && list_methods().count(name) != 0;
    case Kind::Loop: return name == "cycle";
    default: return false;
  }
}

bool is_unsafe_method(const Val& obj, const std::string& name) {
  static const std::unordered_set<std::string> dict_unsafe = {"pop", "popitem", "setdefault", "update", "clear",
                                                              "fromkeys"};
  static const std::unordered_set<std::string> list_unsafe = {"append", "extend", "insert", "pop", "remove",
                                                              "reverse", "sort", "clear"};
  if (!name.empty() && name[0] == '_') return true;
  if (obj.kind == Kind::Map) return dict_unsafe.count(name) != 0;
  if (obj.kind == Kind::Seq) return list_unsafe.count(name) != 0;
  return false;
}

Val call_method(Renderer& r, const Val& obj, const std::string& name, CallArgs& a, int line) {
  (void)r;
  (void)line;
  if (obj.kind == Kind::String) return str_method(obj.s, name, a);
  if (obj.kind == Kind::Map) {
    if (name == "items") {
      List out;
      for (const auto& [k, x] : *obj.dict) out.push_back(Val::make_list({Val::str(k), x}, kTuple));
      return Val::make_list(std::move(out));
    }
    if (name == "keys" || name == "values") {
      List out;
      for (const auto& [k, x] : *obj.dict) out.push_back(name == "keys" ? Val::str(k) : x);
      return Val::make_list(std::move(out));
    }
    if (name == "copy") return obj;
    if (name == "get") {
      const Val* k = arg(a, 0, nullptr);
      if (!k) throw TypeErr("get expected at least 1 argument, got 0");
      const Val* d = arg(a, 1, nullptr);
      if (k->is_str())
        for (const auto& [kk, x] : *obj.dict)
          if (kk == k->s) return x;
      return d ? *d : Val::none();
    }
  }
  if (obj.kind == Kind::Seq) {
    if (name == "copy") return obj;
    const Val* x = arg(a, 0, nullptr);
    if (!x) throw TypeErr(name + "() takes exactly one argument");
    int64_t n = 0;
    for (size_t k = 0; k < obj.list->size(); ++k) {
      if (py_eq((*obj.list)[k], *x)) {
        if (name == "index") return Val::integer(static_cast<int64_t>(k));
        ++n;
      }
    }
    if (name == "index") throw TypeErr(to_repr(*x) + " is not in list (ValueError)");
    return Val::integer(n);
  }
  if (obj.kind == Kind::Loop && name == "cycle") {
    if (a.pos.empty()) throw TypeErr("no items for cycling given");
    return a.pos[obj.loop->index0 % a.pos.size()];
  }
  throw TypeErr(std::string("'") + type_name(obj) + "' object has no method '" + name + "'");
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
    v.ns = std::make_shared<Namespace>();
    v.ns->attrs = dict_from(a, true, r, line);
    return v;
  });
  add("dict", [dict_from](Renderer& r, CallArgs& a, int line) -> Val {
    return Val::make_dict(dict_from(a, false, r, line));
  });
  add("range", [](Renderer& r, CallArgs& a, int line) -> Val {
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
      if (out.size() >= 100000)
        r.fail(line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.push_back(Val::integer(k));
    }
    return Val::make_list(std::move(out));
  });
  return g;
}

const void* find_filter(const std::string& name) { return filter_entry(name); }
const void* find_test(const std::string& name) { return test_entry(name); }
bool is_supported_method(const std::string& name) {
  return str_methods().count(name) || dict_methods().count(name) || list_methods().count(name) || name == "cycle";
}
bool is_unsupported_global(const std::string& name) {
  return name == "cycler" || name == "joiner" || name == "lipsum" || name == "self";
}

}  // namespace ft::jinja::detail

// Python's str, dict and list methods for ft::jinja (`s.strip()`, `d.items()`, `l.index(x)`) and `loop.cycle()`;
// str methods are a table from name to implementation.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "jinja/render.h"
#include "jinja/strings.h"

namespace ft::jinja::detail {
namespace {

// ------------------------------------------------------------------------------------------------ str methods
// Each takes the string, the method's name (one function serves a family: strip, lstrip, rstrip), the call's
// arguments and the render's output limit.

using StrMethod = Val (*)(const std::string& s, const std::string& name, CallArgs& a, size_t max_bytes);

Val str_strip(const std::string& s, const std::string& name, CallArgs& a, size_t) {
  return Val::str(strip(s, arg(a, 0, "chars"), name != "rstrip", name != "lstrip"));
}

Val str_split(const std::string& s, const std::string& name, CallArgs& a, size_t) {
  return Val::make_list(split(s, arg(a, 0, "sep"), arg_int(a, 1, "maxsplit", -1), name == "rsplit"));
}

Val str_splitlines(const std::string& s, const std::string&, CallArgs& a, size_t) {
  List out;
  for (auto& l : splitlines(s, arg_bool(a, 0, "keepends", false))) out.push_back(Val::str(l));
  return Val::make_list(std::move(out));
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

// startswith, endswith: a string or a tuple of strings.
Val str_affix(const std::string& s, const std::string& name, CallArgs& a, size_t) {
  const Val* x = arg(a, 0, nullptr);
  if (!x) throw TypeErr(name + "() takes at least 1 argument");
  if (a.pos.size() > 1) throw TypeErr(name + "() start/end arguments are not supported");
  return Val::boolean(matches_affix(s, *x, name == "startswith"));
}

Val str_upper(const std::string& s, const std::string&, CallArgs&, size_t) {
  return Val::str(map_chars(s, py_upper));
}
// lower, casefold
Val str_lower(const std::string& s, const std::string&, CallArgs&, size_t) {
  return Val::str(map_chars(s, py_lower));
}
Val str_swapcase(const std::string& s, const std::string&, CallArgs&, size_t) {
  return Val::str(map_chars(s, [](char32_t c) { return py_isupper(c) ? py_lower(c) : py_upper(c); }));
}
Val str_title(const std::string& s, const std::string&, CallArgs&, size_t) {
  return Val::str(py_title(s));
}
Val str_capitalize(const std::string& s, const std::string&, CallArgs&, size_t) {
  return Val::str(py_capitalize(s));
}

Val str_replace(const std::string& s, const std::string&, CallArgs& a, size_t) {
  const Val* o = arg(a, 0, nullptr);
  const Val* n = arg(a, 1, nullptr);
  if (!o || !n) throw TypeErr("replace() needs old and new");
  return Val::str(
      replace(s, need_str(*o, "replace() arg 1"), need_str(*n, "replace() arg 2"), arg_int(a, 2, "count", -1)));
}

// The substring argument of find, rfind, index, rindex and count (no start/end).
const std::string& substring_arg(const std::string& name, const CallArgs& a) {
  const Val* x = arg(a, 0, nullptr);
  if (!x) throw TypeErr(name + "() takes at least 1 argument");
  const std::string& sub = need_str(*x, name.c_str());
  if (a.pos.size() > 1) throw TypeErr(name + "() start/end arguments are not supported");
  return sub;
}

// find, rfind (-1 when absent), index, rindex (ValueError when absent): a code point index.
Val str_find(const std::string& s, const std::string& name, CallArgs& a, size_t) {
  const std::string& sub = substring_arg(name, a);
  size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
  if (p == std::string::npos) {
    if (name == "index" || name == "rindex") throw TypeErr("substring not found (ValueError)");
    return Val::integer(-1);
  }
  return Val::integer(cp_index(s, p));
}

// Non-overlapping occurrences; an empty substring occurs between every two code points and at both ends.
Val str_count(const std::string& s, const std::string& name, CallArgs& a, size_t) {
  const std::string& sub = substring_arg(name, a);
  if (sub.empty()) return Val::integer(static_cast<int64_t>(utf8_length(s)) + 1);
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return Val::integer(n);
}

Val str_join(const std::string& s, const std::string&, CallArgs& a, size_t) {
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

Val str_format_method(const std::string& s, const std::string&, CallArgs& a, size_t) {
  return Val::str(str_format(s, a));
}

// isupper, islower: no character of the other case, and at least one cased character.
Val str_is_case(const std::string& s, const std::string& name, CallArgs&, size_t) {
  std::u32string u = U(s);
  if (u.empty()) return Val::boolean(false);
  bool cased = false;
  for (char32_t c : u) {
    if (name == "isupper" ? py_islower(c) : py_isupper(c)) return Val::boolean(false);
    cased = cased || is_cased(c);
  }
  return Val::boolean(cased);
}

// isalpha, isalnum, isspace, isdigit (isnumeric and isdecimal too): non-empty, and every character of the class.
Val str_is_class(const std::string& s, const std::string& name, CallArgs&, size_t) {
  std::u32string u = U(s);
  if (u.empty()) return Val::boolean(false);
  bool (*pred)(char32_t) = name == "isalpha"   ? py_isalpha
                           : name == "isalnum" ? py_isalnum
                           : name == "isspace" ? py_isspace
                                               : py_isdigit;
  return Val::boolean(std::all_of(u.begin(), u.end(), pred));
}

// removeprefix, removesuffix.
Val str_remove_affix(const std::string& s, const std::string& name, CallArgs& a, size_t) {
  const Val* x = arg(a, 0, nullptr);
  if (!x) throw TypeErr(name + "() takes exactly one argument");
  const std::string& af = need_str(*x, name.c_str());
  if (name == "removeprefix" && s.compare(0, af.size(), af) == 0) return Val::str(s.substr(af.size()));
  if (name == "removesuffix" && !af.empty() && af.size() <= s.size() &&
      s.compare(s.size() - af.size(), af.size(), af) == 0)
    return Val::str(s.substr(0, s.size() - af.size()));
  return Val::str(s);
}

// partition, rpartition: the (before, separator, after) tuple.
Val str_partition(const std::string& s, const std::string& name, CallArgs& a, size_t) {
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

// zfill, ljust, rjust, center: padded to a width in code points.
Val str_pad(const std::string& s, const std::string& name, CallArgs& a, size_t max_bytes) {
  int64_t width = arg_int(a, 0, nullptr, 0);
  const Val* fillv = arg(a, 1, nullptr);
  std::string fill = fillv ? need_str(*fillv, "fill character") : (name == "zfill" ? "0" : " ");
  size_t len = utf8_length(s);
  if (width <= static_cast<int64_t>(len)) return Val::str(s);
  size_t pad = static_cast<size_t>(width) - len;
  check_result_size(pad, std::max<size_t>(fill.size(), 1), max_bytes);
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

const std::unordered_map<std::string, StrMethod>& str_methods() {
  static const std::unordered_map<std::string, StrMethod> m = {
      {"strip", str_strip},
      {"lstrip", str_strip},
      {"rstrip", str_strip},
      {"split", str_split},
      {"rsplit", str_split},
      {"splitlines", str_splitlines},
      {"startswith", str_affix},
      {"endswith", str_affix},
      {"upper", str_upper},
      {"lower", str_lower},
      {"casefold", str_lower},
      {"swapcase", str_swapcase},
      {"title", str_title},
      {"capitalize", str_capitalize},
      {"replace", str_replace},
      {"find", str_find},
      {"rfind", str_find},
      {"index", str_find},
      {"rindex", str_find},
      {"count", str_count},
      {"join", str_join},
      {"format", str_format_method},
      {"isupper", str_is_case},
      {"islower", str_is_case},
      {"isdigit", str_is_class},
      {"isalpha", str_is_class},
      {"isalnum", str_is_class},
      {"isspace", str_is_class},
      {"isnumeric", str_is_class},
      {"isdecimal", str_is_class},
      {"removeprefix", str_remove_affix},
      {"removesuffix", str_remove_affix},
      {"partition", str_partition},
      {"rpartition", str_partition},
      {"zfill", str_pad},
      {"ljust", str_pad},
      {"rjust", str_pad},
      {"center", str_pad},
  };
  return m;
}

Val str_method(const std::string& s, const std::string& name, CallArgs& a, size_t max_bytes) {
  auto it = str_methods().find(name);
  if (it == str_methods().end()) throw TypeErr("unsupported str method '" + name + "'");
  return it->second(s, name, a, max_bytes);
}

// ------------------------------------------------------------------------------------------------ dict, list

const std::unordered_set<std::string>& dict_methods() {
  static const std::unordered_set<std::string> s = {"items", "keys", "values", "get", "copy"};
  return s;
}
const std::unordered_set<std::string>& list_methods() {
  static const std::unordered_set<std::string> s = {"index", "count", "copy"};
  return s;
}

}  // namespace

bool has_method(const Val& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::String:
      return str_methods().count(name) != 0;
    case Kind::Map:
      return dict_methods().count(name) != 0;
    case Kind::Seq:
      return !(obj.flags & kGen) && list_methods().count(name) != 0;
    case Kind::Loop:
      return name == "cycle";
    default:
      return false;
  }
}

bool is_unsafe_method(const Val& obj, const std::string& name) {
  static const std::unordered_set<std::string> dict_unsafe = {"pop",    "popitem", "setdefault",
                                                              "update", "clear",   "fromkeys"};
  static const std::unordered_set<std::string> list_unsafe = {"append", "extend",  "insert", "pop",
                                                              "remove", "reverse", "sort",   "clear"};
  if (!name.empty() && name[0] == '_') return true;
  if (obj.kind == Kind::Map) return dict_unsafe.count(name) != 0;
  if (obj.kind == Kind::Seq) return list_unsafe.count(name) != 0;
  return false;
}

Val call_method(Renderer& r, const Val& obj, const std::string& name, CallArgs& a, int line) {
  (void)r;
  (void)line;
  if (obj.kind == Kind::String) return str_method(obj.s, name, a, r.options().max_output_bytes);
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

bool is_supported_method(const std::string& name) {
  return str_methods().count(name) || dict_methods().count(name) || list_methods().count(name) || name == "cycle";
}

}  // namespace ft::jinja::detail

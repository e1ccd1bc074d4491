// jinja2's filters on sequences and mappings for ft::jinja (length, first, join, sort, unique, map, select, ...);
// filters.cpp lists them by name.
#include <algorithm>
#include <cstdlib>

#include "jinja/filters.h"
#include "jinja/strings.h"

namespace ft::jinja::detail {
namespace {

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
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
    cur = r.getitem(cur, digits ? Val::integer(std::atoll(part.c_str())) : Val::str(part), line);
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return cur;
}

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

// The min or max filter: the first smallest or largest item, compared by attribute and case-insensitively unless
// asked otherwise.
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

}  // namespace

Val f_length(Renderer&, const Val& v, CallArgs&, int) {
  switch (v.kind) {
    case Kind::Undefined:
      return Val::integer(0);
    case Kind::String:
      return Val::integer(static_cast<int64_t>(utf8_length(v.s)));
    case Kind::Seq:
      if (v.flags & kGen) break;
      return Val::integer(static_cast<int64_t>(v.list->size()));
    case Kind::Map:
      return Val::integer(static_cast<int64_t>(v.dict->size()));
    case Kind::Loop:
      return Val::integer(static_cast<int64_t>(v.loop->items->size()));
    default:
      break;
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

Val f_list(Renderer&, const Val& v, CallArgs&, int) {
  return Val::make_list(iterate(v));
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

Val f_min(Renderer& r, const Val& v, CallArgs& a, int line) {
  return minmax(r, v, a, line, false);
}
Val f_max(Renderer& r, const Val& v, CallArgs& a, int line) {
  return minmax(r, v, a, line, true);
}

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
      throw TypeErr(std::string("unsupported operand type(s) for +: '") + type_name(acc) + "' and '" + type_name(x) +
                    "'");
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
    if (b == "value")
      pos = 1;
    else if (b != "key")
      throw TypeErr("You can only sort by either \"key\" or \"value\" (FilterArgumentError)");
  }
  List items;
  for (const auto& [k, x] : *v.dict) items.push_back(Val::make_list({Val::str(k), x}, kTuple));
  std::stable_sort(items.begin(), items.end(), [&](const Val& x, const Val& y) {
    Val kx = lower_key((*x.list)[static_cast<size_t>(pos)], cs),
        ky = lower_key((*y.list)[static_cast<size_t>(pos)], cs);
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

Val f_select(Renderer& r, const Val& v, CallArgs& a, int line) {
  return select_impl(r, v, a, line, false, true);
}
Val f_reject(Renderer& r, const Val& v, CallArgs& a, int line) {
  return select_impl(r, v, a, line, false, false);
}
Val f_selectattr(Renderer& r, const Val& v, CallArgs& a, int line) {
  return select_impl(r, v, a, line, true, true);
}
Val f_rejectattr(Renderer& r, const Val& v, CallArgs& a, int line) {
  return select_impl(r, v, a, line, true, false);
}

}  // namespace ft::jinja::detail

// jinja2's tests for ft::jinja (`x is defined`, `n is divisibleby 3`, `s is lower`, ...), the predicates of
// `is`, select and reject, and their table by name (jinja2's names, aliases included).
#include <cmath>
#include <unordered_map>

#include "jinja/render.h"
#include "jinja/strings.h"

namespace ft::jinja::detail {
namespace {

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

bool t_defined(Renderer&, const Val& v, CallArgs&, int) {
  return !v.is_undef();
}
bool t_undefined(Renderer&, const Val& v, CallArgs&, int) {
  return v.is_undef();
}
bool t_none(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::None;
}
bool t_string(Renderer&, const Val& v, CallArgs&, int) {
  return v.is_str();
}
bool t_number(Renderer&, const Val& v, CallArgs&, int) {
  return v.is_num();
}
bool t_integer(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Int;
}
bool t_float(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Float;
}
bool t_mapping(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Map;
}
bool t_iterable(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Undefined || v.is_str() || v.kind == Kind::Seq || v.kind == Kind::Map;
}
bool t_sequence(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Undefined || v.is_str() || (v.kind == Kind::Seq && !(v.flags & kGen)) || v.kind == Kind::Map;
}
bool t_boolean(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Bool;
}
bool t_true(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Bool && v.b;
}
bool t_false(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Bool && !v.b;
}
bool t_eq(Renderer&, const Val& v, CallArgs& a, int) {
  return py_eq(v, targ(a, "eq"));
}
bool t_ne(Renderer&, const Val& v, CallArgs& a, int) {
  return !py_eq(v, targ(a, "ne"));
}
void no_undef(const Val& x, const Val& y) {
  if (x.is_undef() || y.is_undef()) throw TypeErr((x.is_undef() ? x.s : y.s) + " (UndefinedError)");
}
bool t_lt(Renderer&, const Val& v, CallArgs& a, int) {
  no_undef(v, targ(a, "lt"));
  return py_lt(v, targ(a, "lt"));
}
bool t_le(Renderer&, const Val& v, CallArgs& a, int) {
  no_undef(v, targ(a, "le"));
  return py_lt(v, targ(a, "le")) || py_eq(v, targ(a, "le"));
}
bool t_gt(Renderer&, const Val& v, CallArgs& a, int) {
  no_undef(v, targ(a, "gt"));
  return py_lt(targ(a, "gt"), v);
}
bool t_ge(Renderer&, const Val& v, CallArgs& a, int) {
  no_undef(v, targ(a, "ge"));
  return py_lt(targ(a, "ge"), v) || py_eq(v, targ(a, "ge"));
}
bool t_odd(Renderer&, const Val& v, CallArgs&, int) {
  return py_eq(py_mod(v, 2), Val::integer(1));
}
bool t_even(Renderer&, const Val& v, CallArgs&, int) {
  return py_eq(py_mod(v, 2), Val::integer(0));
}
bool t_divisibleby(Renderer&, const Val& v, CallArgs& a, int) {
  const Val& n = targ(a, "divisibleby");
  if (!n.is_intlike()) throw TypeErr("divisibleby needs an integer");
  return py_eq(py_mod(v, n.as_int()), Val::integer(0));
}
bool t_in(Renderer&, const Val& v, CallArgs& a, int) {
  return truthy(py_in(v, targ(a, "in")));
}
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
bool t_callable(Renderer&, const Val& v, CallArgs&, int) {
  return v.kind == Kind::Callable || v.kind == Kind::Loop;
}
bool t_sameas(Renderer&, const Val& v, CallArgs& a, int) {
  const Val& o = targ(a, "sameas");
  if (v.kind != o.kind) return false;
  switch (v.kind) {
    case Kind::None:
    case Kind::Undefined:
      return v.kind == Kind::None;
    case Kind::Bool:
      return v.b == o.b;
    case Kind::Int:
      return v.i == o.i && v.i >= -5 && v.i <= 256;
    case Kind::Seq:
      return v.list == o.list;
    case Kind::Map:
      return v.dict == o.dict;
    case Kind::Namespace:
      return v.ns == o.ns;
    case Kind::Callable:
      return v.fn == o.fn;
    default:
      return false;
  }
}
bool t_escaped(Renderer&, const Val& v, CallArgs&, int) {
  return v.is_str() && (v.flags & kMarkup);
}
bool t_filter(Renderer&, const Val& v, CallArgs&, int) {
  return v.is_str() && filter_entry(v.s) != nullptr;
}
bool t_test(Renderer&, const Val& v, CallArgs&, int) {
  return v.is_str() && test_entry(v.s) != nullptr;
}

const std::unordered_map<std::string, TestEntry>& tests() {
  static const std::unordered_map<std::string, TestEntry> m = {
      {"defined", {t_defined}},
      {"undefined", {t_undefined}},
      {"none", {t_none}},
      {"string", {t_string}},
      {"number", {t_number}},
      {"integer", {t_integer}},
      {"float", {t_float}},
      {"mapping", {t_mapping}},
      {"iterable", {t_iterable}},
      {"sequence", {t_sequence}},
      {"boolean", {t_boolean}},
      {"true", {t_true}},
      {"false", {t_false}},
      {"eq", {t_eq}},
      {"equalto", {t_eq}},
      {"==", {t_eq}},
      {"ne", {t_ne}},
      {"!=", {t_ne}},
      {"lt", {t_lt}},
      {"lessthan", {t_lt}},
      {"<", {t_lt}},
      {"le", {t_le}},
      {"<=", {t_le}},
      {"gt", {t_gt}},
      {"greaterthan", {t_gt}},
      {">", {t_gt}},
      {"ge", {t_ge}},
      {">=", {t_ge}},
      {"odd", {t_odd}},
      {"even", {t_even}},
      {"divisibleby", {t_divisibleby}},
      {"in", {t_in}},
      {"lower", {t_lower}},
      {"upper", {t_upper}},
      {"callable", {t_callable}},
      {"sameas", {t_sameas}},
      {"escaped", {t_escaped}},
      {"filter", {t_filter}},
      {"test", {t_test}},
  };
  return m;
}

}  // namespace

const TestEntry* test_entry(const std::string& name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : &it->second;
}

const void* find_test(const std::string& name) {
  return test_entry(name);
}

}  // namespace ft::jinja::detail

// Python's operators on template values for ft::jinja: the arithmetic of binary operators (+ - * / // % **, one
// function per operator), comparisons, `in`, and %-formatting of strings.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "jinja/render.h"
#include "jinja/strings.h"

// percent_format passes template-provided format strings to snprintf on purpose.
#pragma GCC diagnostic ignored "-Wformat-nonliteral"

namespace ft::jinja::detail {
namespace {

// ------------------------------------------------------------------------------------------------ arithmetic

// The TypeError of an operator that does not apply to these operand types.
TypeErr unsupported(const char* op, const Val& a, const Val& b) {
  return TypeErr(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                 type_name(b) + "'");
}

bool both_numbers(const Val& a, const Val& b) {
  return a.is_num() && b.is_num();
}
bool both_ints(const Val& a, const Val& b) {
  return a.is_intlike() && b.is_intlike();
}

Val check_int(bool overflow, int64_t v) {
  if (overflow) throw TypeErr("integer overflow (Python would use a big integer here)");
  return Val::integer(v);
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

// Numbers, strings, and lists or tuples (not both-generator: a list with a list, a tuple with a tuple).
Val op_add(const Val& a, const Val& b, size_t) {
  if (both_ints(a, b)) {
    int64_t r = 0;
    bool of = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
    return check_int(of, r);
  }
  if (both_numbers(a, b)) return Val::real(a.as_double() + b.as_double());
  if (a.is_str() && b.is_str()) return Val::str(a.s + b.s);
  if (a.kind == Kind::Seq && b.kind == Kind::Seq && !((a.flags | b.flags) & kGen) &&
      (a.flags & kTuple) == (b.flags & kTuple)) {
    List l = *a.list;
    l.insert(l.end(), b.list->begin(), b.list->end());
    return Val::make_list(std::move(l), a.flags & kTuple);
  }
  if (a.is_str()) throw TypeErr(std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
  if (a.kind == Kind::Seq)
    throw TypeErr(std::string("can only concatenate list (not \"") + type_name(b) + "\") to list");
  throw unsupported("+", a, b);
}

Val op_sub(const Val& a, const Val& b, size_t) {
  if (both_ints(a, b)) {
    int64_t r = 0;
    bool of = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
    return check_int(of, r);
  }
  if (both_numbers(a, b)) return Val::real(a.as_double() - b.as_double());
  throw unsupported("-", a, b);
}

// Numbers, or a string, list or tuple repeated an integer number of times (either operand order).
Val op_mul(const Val& a, const Val& b, size_t max_bytes) {
  if (both_ints(a, b)) {
    int64_t r = 0;
    bool of = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
    return check_int(of, r);
  }
  if (both_numbers(a, b)) return Val::real(a.as_double() * b.as_double());
  const Val* seq = a.is_intlike() ? &b : &a;
  const Val* cnt = a.is_intlike() ? &a : &b;
  if (!cnt->is_intlike() || !(seq->is_str() || (seq->kind == Kind::Seq && !(seq->flags & kGen))))
    throw unsupported("*", a, b);
  int64_t n = cnt->as_int();
  size_t unit = seq->is_str() ? seq->s.size() : seq->list->size();
  if (n > 0) check_result_size(static_cast<uint64_t>(n), unit, max_bytes);
  if (unit == 0) n = 0;  // '' * n and [] * n are empty whatever n is
  if (seq->is_str()) {
    std::string r;
    for (int64_t k = 0; k < n; ++k) r += seq->s;
    return Val::str(std::move(r));
  }
  List l;
  for (int64_t k = 0; k < n; ++k) l.insert(l.end(), seq->list->begin(), seq->list->end());
  return Val::make_list(std::move(l), seq->flags & kTuple);
}

Val op_truediv(const Val& a, const Val& b, size_t) {
  if (!both_numbers(a, b)) throw unsupported("/", a, b);
  if (b.as_double() == 0) throw TypeErr("division by zero (ZeroDivisionError)");
  return Val::real(a.as_double() / b.as_double());
}

// Rounds toward negative infinity, as Python does.
Val op_floordiv(const Val& a, const Val& b, size_t) {
  if (!both_numbers(a, b)) throw unsupported("//", a, b);
  if (both_ints(a, b)) {
    if (b.as_int() == 0) throw TypeErr("integer division or modulo by zero (ZeroDivisionError)");
    int64_t x = a.as_int(), y = b.as_int();
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Val::integer(q);
  }
  if (b.as_double() == 0) throw TypeErr("float floor division by zero (ZeroDivisionError)");
  double x = a.as_double(), y = b.as_double();
  return Val::real(std::floor(x / y));
}

// A string on the left formats (percent_format); on numbers the result takes the divisor's sign, as in Python.
Val op_mod(const Val& a, const Val& b, size_t max_bytes) {
  if (a.is_str()) return percent_format(a.s, b, max_bytes);
  if (!both_numbers(a, b)) throw unsupported("%", a, b);
  if (both_ints(a, b)) {
    if (b.as_int() == 0) throw TypeErr("integer division or modulo by zero (ZeroDivisionError)");
    int64_t x = a.as_int(), y = b.as_int();
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Val::integer(m);
  }
  if (b.as_double() == 0) throw TypeErr("float modulo (ZeroDivisionError)");
  return Val::real(py_fmod(a.as_double(), b.as_double()));
}

// An int to a non-negative int power stays an int; everything else is a float.
Val op_pow(const Val& a, const Val& b, size_t) {
  if (!both_numbers(a, b)) throw unsupported("**", a, b);
  if (both_ints(a, b) && b.as_int() >= 0) {
    int64_t r = 1, base = a.as_int();
    for (int64_t k = 0; k < b.as_int(); ++k) {
      if (__builtin_mul_overflow(r, base, &r)) throw TypeErr("integer overflow (Python would use a big integer)");
      if (r == 0 || r == 1) break;
    }
    return Val::integer(r);
  }
  return Val::real(std::pow(a.as_double(), b.as_double()));
}

using BinaryFn = Val (*)(const Val& a, const Val& b, size_t max_bytes);

const std::unordered_map<std::string, BinaryFn>& binary_ops() {
  static const std::unordered_map<std::string, BinaryFn> m = {
      {"+", op_add},       {"-", op_sub}, {"*", op_mul},  {"/", op_truediv},
      {"//", op_floordiv}, {"%", op_mod}, {"**", op_pow},
  };
  return m;
}

}  // namespace

Val Renderer::eval_binary(const std::string& op, const Val& a, const Val& b) {
  if (a.is_undef() || b.is_undef()) throw TypeErr((a.is_undef() ? a.s : b.s) + " (UndefinedError)");
  auto it = binary_ops().find(op);
  if (it == binary_ops().end()) throw unsupported(op.c_str(), a, b);
  return it->second(a, b, opts_.max_output_bytes);
}

// ------------------------------------------------------------------------------------------------ comparisons

bool py_compare(const std::string& op, const Val& left, const Val& right) {
  if (op == "==") return py_eq(left, right);
  if (op == "!=") return !py_eq(left, right);
  if (op == "in") return truthy(py_in(left, right));
  if (op == "notin") return !truthy(py_in(left, right));
  if (left.is_undef() || right.is_undef()) throw TypeErr((left.is_undef() ? left.s : right.s) + " (UndefinedError)");
  try {
    if (op == "<") return py_lt(left, right);
    if (op == ">") return py_lt(right, left);
    if (op == "<=") return py_lt(left, right) || py_eq(left, right);
    return py_lt(right, left) || py_eq(left, right);
  } catch (const TypeErr&) {
    throw TypeErr("'" + op + "' not supported between instances of '" + type_name(left) + "' and '" + type_name(right) +
                  "'");
  }
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

// ------------------------------------------------------------------------------------------------ %-formatting

namespace {

// Whether a number formatted with `spec` ("%" flags width .precision) fits format_number's 512-byte buffer:
// width <= 400 and precision <= 100 (a double's integer part has at most 309 digits).
bool number_fits(const std::string& spec) {
  const size_t dot = spec.find('.');
  const size_t w = spec.find_first_of("123456789");
  const std::string width =
      w != std::string::npos && w < dot ? spec.substr(w, dot == std::string::npos ? dot : dot - w) : "";
  const std::string precision = dot != std::string::npos ? spec.substr(dot + 1) : "";
  return (width.empty() || (width.size() <= 3 && std::stoi(width) <= 400)) &&
         (precision.empty() || (precision.size() <= 3 && std::stoi(precision) <= 100));
}

// The value of a "%(key)" conversion whose '(' is at k, from the mapping argsv; k moves past the ')'.
const Val* mapping_value(const std::string& fmt, size_t& k, const Val& argsv, bool mapping) {
  const Val* v = nullptr;
  size_t e = fmt.find(')', k);
  if (e == std::string::npos || !mapping) throw TypeErr("format requires a mapping");
  std::string key = fmt.substr(k + 1, e - k - 1);
  for (const auto& [kk, vv] : *argsv.dict)
    if (kk == key) v = &vv;
  if (!v) throw TypeErr("KeyError: " + py_str_repr(key));
  k = e + 1;
  return v;
}

// The flags, width and precision from k on, as "%" followed by them; k moves past them.
std::string read_spec(const std::string& fmt, size_t& k) {
  std::string spec = "%";
  // (strchr also finds the terminating NUL: a NUL byte in the template must not reach snprintf's format.)
  while (k < fmt.size() && fmt[k] != '\0' && std::strchr("-+ 0#", fmt[k]) != nullptr) spec += fmt[k++];
  while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) spec += fmt[k++];
  if (k < fmt.size() && fmt[k] == '.') {
    spec += fmt[k++];
    while (k < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[k]))) spec += fmt[k++];
  }
  return spec;
}

// %s, %r, %a: str() or repr() cut to the precision and padded to the width, by code point.
std::string format_text(const std::string& spec, char conv, const Val& v, size_t max_bytes) {
  std::u32string s = utf8_decode(conv == 's' ? to_str(v) : to_repr(v));
  size_t dot = spec.find('.');
  if (dot != std::string::npos) s = s.substr(0, static_cast<size_t>(std::atoll(spec.c_str() + dot + 1)));
  size_t wstart = spec.find_first_of("123456789");
  size_t width = (wstart != std::string::npos && (dot == std::string::npos || wstart < dot))
                     ? static_cast<size_t>(std::atoll(spec.c_str() + wstart))
                     : 0;
  std::string body = utf8_encode(s);
  check_result_size(width, 1, max_bytes);
  std::string pad(width > s.size() ? width - s.size() : 0, ' ');
  return spec.find('-') != std::string::npos ? body + pad : pad + body;
}

// %d %i %x %X %o and %f %F %e %E %g %G through snprintf.
std::string format_number(std::string spec, char conv, const Val& v) {
  char buf[512];
  if (!number_fits(spec)) {
    throw TypeErr("format width over 400 or precision over 100 is not supported for numbers: " + spec + conv);
  } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
    if (!v.is_num()) throw TypeErr(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
    long long x = v.kind == Kind::Float ? static_cast<long long>(std::trunc(v.f)) : v.as_int();
    spec += "ll";
    spec += conv == 'i' ? 'd' : conv;
    std::snprintf(buf, sizeof buf, spec.c_str(), x);
  } else if (conv != '\0' && std::strchr("fFeEgG", conv) != nullptr) {
    if (!v.is_num()) throw TypeErr(std::string("must be real number, not ") + type_name(v));
    spec += conv;
    std::snprintf(buf, sizeof buf, spec.c_str(), v.as_double());
  } else {
    throw TypeErr(std::string("unsupported format character '") + conv + "'");
  }
  return buf;
}

}  // namespace

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
    const Val* v = fmt[k] == '(' ? mapping_value(fmt, k, argsv, mapping) : nullptr;
    std::string spec = read_spec(fmt, k);
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
    if (conv == 's' || conv == 'r' || conv == 'a')
      out += format_text(spec, conv, *v, max_bytes);
    else
      out += format_number(spec, conv, *v);
  }
  if (!mapping && next != args.size()) throw TypeErr("not all arguments converted during string formatting");
  return Val::str(std::move(out));
}

}  // namespace ft::jinja::detail

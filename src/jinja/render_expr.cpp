// Interpreter of ft::jinja: expressions, with Python's operators and calls.
#include "jinja/render.h"

#include <algorithm>
#include <cmath>

namespace ft::jinja::detail {

static Val check_int(bool overflow, int64_t v) {
  if (overflow) throw TypeErr("integer overflow (Python would use a big integer here)");
  return Val::integer(v);
}

static double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

Val Renderer::eval_binary(const std::string& op, const Val& a, const Val& b) {
  if (a.is_undef() || b.is_undef()) throw TypeErr((a.is_undef() ? a.s : b.s) + " (UndefinedError)");
  auto unsupported = [&]() -> TypeErr {
    return TypeErr("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  bool nums = a.is_num() && b.is_num();
  bool ints = a.is_intlike() && b.is_intlike();
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      bool of = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return check_int(of, r);
    }
    if (nums) return Val::real(a.as_double() + b.as_double());
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
    throw unsupported();
  }
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      bool of = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return check_int(of, r);
    }
    if (nums) return Val::real(a.as_double() - b.as_double());
    throw unsupported();
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      bool of = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return check_int(of, r);
    }
    if (nums) return Val::real(a.as_double() * b.as_double());
    const Val* seq = a.is_intlike() ? &b : &a;
    const Val* cnt = a.is_intlike() ? &a : &b;
    if (cnt->is_intlike() && (seq->is_str() || (seq->kind == Kind::Seq && !(seq->flags & kGen)))) {
      int64_t n = cnt->as_int();
      size_t unit = seq->is_str() ? seq->s.size() : seq->list->size();
      if (n > 0) check_result_size(static_cast<uint64_t>(n), unit, opts_.max_output_bytes);
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
    throw unsupported();
  }
  if (op == "/") {
    if (!nums) throw unsupported();
    if (b.as_double() == 0) throw TypeErr("division by zero (ZeroDivisionError)");
    return Val::real(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!nums) throw unsupported();
    if (ints) {
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
  if (op == "%") {
    if (a.is_str()) return percent_format(a.s, b, opts_.max_output_bytes);
    if (!nums) throw unsupported();
    if (ints) {
      if (b.as_int() == 0) throw TypeErr("integer division or modulo by zero (ZeroDivisionError)");
      int64_t x = a.as_int(), y = b.as_int();
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Val::integer(m);
    }
    if (b.as_double() == 0) throw TypeErr("float modulo (ZeroDivisionError)");
    return Val::real(py_fmod(a.as_double(), b.as_double()));
  }
  if (op == "**") {
    if (!nums) throw unsupported();
    if (ints && b.as_int() >= 0) {
      int64_t r = 1, base = a.as_int();
      for (int64_t k = 0; k < b.as_int(); ++k) {
        if (__builtin_mul_overflow(r, base, &r)) throw TypeErr("integer overflow (Python would use a big integer)");
        if (r == 0 || r == 1) break;
      }
      return Val::integer(r);
    }
    return Val::real(std::pow(a.as_double(), b.as_double()));
  }
  throw unsupported();
}

Val Renderer::eval(const Expr& e, const FrameP& f) {
  switch (e.kind) {
    case EK::Const:
      return e.value;
    case EK::Name:
      return lookup(e.name, f);
    case EK::ListLit:
    case EK::Tuple: {
      List l;
      l.reserve(e.args.size());
      for (const auto& x : e.args) l.push_back(eval(*x, f));
      return Val::make_list(std::move(l), e.kind == EK::Tuple ? kTuple : 0);
    }
    case EK::DictLit: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Val key = eval(*e.args[k], f);
        if (!key.is_str()) fail(e.line, "unsupported: dict literal with a non-string key");
        Val v = eval(*e.args[k + 1], f);
        auto it = std::find_if(d.begin(), d.end(), [&](const auto& p) { return p.first == key.s; });
        if (it != d.end())
          it->second = v;
        else
          d.emplace_back(key.s, v);
      }
      return Val::make_dict(std::move(d));
    }
    case EK::GetAttr:
      return getattr(eval(*e.a, f), e.name, e.line);
    case EK::GetItem: {
      Val obj = eval(*e.a, f);
      Val key = eval(*e.b, f);
      return getitem(obj, key, e.line);
    }
    case EK::Slice: {
      List parts;
      for (const auto& x : e.args) parts.push_back(x ? eval(*x, f) : Val::none());
      Val v = Val::make_list(std::move(parts), kTuple);
      v.s = "<slice>";
      return v;
    }
    case EK::Call:
      return eval_call(e, f);
    case EK::Filter: {
      Val input = e.a ? eval(*e.a, f) : (filter_input_ ? *filter_input_ : Val::str(""));
      CallArgs args = eval_args(e, f);
      try {
        return static_cast<const FilterEntry*>(e.fn)->fn(*this, input, args, e.line);
      } catch (const TypeErr& err) {
        fail(e.line, std::string(err.what()) + " (in filter '" + e.name + "')");
      }
    }
    case EK::Test: {
      Val input = eval(*e.a, f);
      CallArgs args = eval_args(e, f);
      try {
        return Val::boolean(static_cast<const TestEntry*>(e.fn)->fn(*this, input, args, e.line));
      } catch (const TypeErr& err) {
        fail(e.line, std::string(err.what()) + " (in test '" + e.name + "')");
      }
    }
    case EK::Neg:
    case EK::Pos: {
      Val v = eval(*e.a, f);
      if (v.is_undef()) fail(e.line, v.s + " (UndefinedError)");
      if (!v.is_num())
        fail(e.line,
             std::string("bad operand type for unary ") + (e.kind == EK::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
      if (e.kind == EK::Pos) return v.kind == Kind::Float ? v : Val::integer(v.as_int());
      return v.kind == Kind::Float ? Val::real(-v.f) : Val::integer(-v.as_int());
    }
    case EK::Not:
      return Val::boolean(!truthy(eval(*e.a, f)));
    case EK::And: {
      Val l = eval(*e.a, f);
      return truthy(l) ? eval(*e.b, f) : l;
    }
    case EK::Or: {
      Val l = eval(*e.a, f);
      return truthy(l) ? l : eval(*e.b, f);
    }
    case EK::Binary: {
      Val l = eval(*e.a, f);
      Val r = eval(*e.b, f);
      try {
        return eval_binary(e.name, l, r);
      } catch (const TypeErr& err) {
        fail(e.line, err.what());
      }
    }
    case EK::Concat: {
      std::string s;
      for (const auto& x : e.args) s += to_str(eval(*x, f));
      return Val::str(std::move(s));
    }
    case EK::Compare: {
      Val left = eval(*e.a, f);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Val right = eval(*e.args[k], f);
        const std::string& op = e.ops[k];
        bool r;
        try {
          if (op == "==") {
            r = py_eq(left, right);
          } else if (op == "!=") {
            r = !py_eq(left, right);
          } else if (op == "in" || op == "notin") {
            r = truthy(py_in(left, right));
            if (op == "notin") r = !r;
          } else {
            if (left.is_undef() || right.is_undef())
              throw TypeErr((left.is_undef() ? left.s : right.s) + " (UndefinedError)");
            try {
              if (op == "<")
                r = py_lt(left, right);
              else if (op == ">")
                r = py_lt(right, left);
              else if (op == "<=")
                r = py_lt(left, right) || py_eq(left, right);
              else
                r = py_lt(right, left) || py_eq(left, right);
            } catch (const TypeErr&) {
              throw TypeErr("'" + op + "' not supported between instances of '" + type_name(left) + "' and '" +
                            type_name(right) + "'");
            }
          }
        } catch (const TypeErr& err) {
          fail(e.line, err.what());
        }
        if (!r) return Val::boolean(false);
        left = std::move(right);
      }
      return Val::boolean(true);
    }
    case EK::CondExpr: {
      if (truthy(eval(*e.a, f))) return eval(*e.b, f);
      if (e.c) return eval(*e.c, f);
      return Val::undef("the inline if-expression on line " + std::to_string(e.line) +
                        " evaluated to false and no else section was defined.");
    }
  }
  return Val();
}

Val Renderer::eval_call(const Expr& e, const FrameP& f) {
  const Expr& callee = *e.a;
  if (callee.kind == EK::GetAttr) {
    Val obj = eval(*callee.a, f);
    if (obj.is_undef()) fail(e.line, obj.s + " (UndefinedError)");
    if (has_method(obj, callee.name)) {
      CallArgs args = eval_args(e, f);
      try {
        return call_method(*this, obj, callee.name, args, e.line);
      } catch (const TypeErr& err) {
        fail(e.line, std::string(err.what()) + " (in method '" + callee.name + "')");
      }
    }
    Val fnv = getattr(obj, callee.name, e.line);
    CallArgs args = eval_args(e, f);
    return call_value(fnv, args, e.line);
  }
  Val fnv = eval(callee, f);
  CallArgs args = eval_args(e, f);
  if (fnv.is_undef() && callee.kind == EK::Name) fail(e.line, fnv.s + " (UndefinedError)");
  return call_value(fnv, args, e.line);
}

}  // namespace ft::jinja::detail

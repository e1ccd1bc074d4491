// The renderer of ft::jinja, expressions: literals, names, filters, tests, calls, unary and logical operators,
// comparison chains, and attribute and item access (x.name, x[key], slices) under the sandbox's rules.
#include <algorithm>

#include "jinja/render.h"
#include "jinja/strings.h"

namespace ft::jinja::detail {

Val Renderer::eval(const Expr& e, const FrameP& f) {
  switch (e.kind) {
    case EK::Const:
      return e.value;
    case EK::Name:
      return lookup(e.name, f);
    case EK::ListLit:
    case EK::Tuple:
      return eval_list(e, f);
    case EK::DictLit:
      return eval_dict(e, f);
    case EK::GetAttr:
      return getattr(eval(*e.a, f), e.name, e.line);
    case EK::GetItem: {
      Val obj = eval(*e.a, f);
      Val key = eval(*e.b, f);
      return getitem(obj, key, e.line);
    }
    case EK::Slice:
      return eval_slice(e, f);
    case EK::Call:
      return eval_call(e, f);
    case EK::Filter:
      return eval_filter(e, f);
    case EK::Test:
      return eval_test(e, f);
    case EK::Neg:
    case EK::Pos:
      return eval_unary(e, f);
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
    case EK::Compare:
      return eval_compare(e, f);
    case EK::CondExpr:
      return eval_cond(e, f);
  }
  return Val();
}

// [a, b] and (a, b).
Val Renderer::eval_list(const Expr& e, const FrameP& f) {
  List l;
  l.reserve(e.args.size());
  for (const auto& x : e.args) l.push_back(eval(*x, f));
  return Val::make_list(std::move(l), e.kind == EK::Tuple ? kTuple : 0);
}

// {k: v, ...}: string keys only; a repeated key keeps its first position and its last value.
Val Renderer::eval_dict(const Expr& e, const FrameP& f) {
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

// start:stop:step inside [], as the (start, stop, step) tuple getitem recognises as a slice.
Val Renderer::eval_slice(const Expr& e, const FrameP& f) {
  List parts;
  for (const auto& x : e.args) parts.push_back(x ? eval(*x, f) : Val::none());
  Val v = Val::make_list(std::move(parts), kTuple);
  v.s = "<slice>";
  return v;
}

// x | name(args): the input is the filter block's captured body when the chain has none.
Val Renderer::eval_filter(const Expr& e, const FrameP& f) {
  Val input = e.a ? eval(*e.a, f) : (filter_input_ ? *filter_input_ : Val::str(""));
  CallArgs args = eval_args(e, f);
  try {
    return static_cast<const FilterEntry*>(e.fn)->fn(*this, input, args, e.line);
  } catch (const TypeErr& err) {
    fail(e.line, std::string(err.what()) + " (in filter '" + e.name + "')");
  }
}

// x is name(args).
Val Renderer::eval_test(const Expr& e, const FrameP& f) {
  Val input = eval(*e.a, f);
  CallArgs args = eval_args(e, f);
  try {
    return Val::boolean(static_cast<const TestEntry*>(e.fn)->fn(*this, input, args, e.line));
  } catch (const TypeErr& err) {
    fail(e.line, std::string(err.what()) + " (in test '" + e.name + "')");
  }
}

// -x and +x on numbers (a bool becomes an int).
Val Renderer::eval_unary(const Expr& e, const FrameP& f) {
  Val v = eval(*e.a, f);
  if (v.is_undef()) fail(e.line, v.s + " (UndefinedError)");
  if (!v.is_num())
    fail(e.line,
         std::string("bad operand type for unary ") + (e.kind == EK::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
  if (e.kind == EK::Pos) return v.kind == Kind::Float ? v : Val::integer(v.as_int());
  return v.kind == Kind::Float ? Val::real(-v.f) : Val::integer(-v.as_int());
}

// a < b <= c ...: each operand evaluated once, stopping at the first false comparison.
Val Renderer::eval_compare(const Expr& e, const FrameP& f) {
  Val left = eval(*e.a, f);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Val right = eval(*e.args[k], f);
    bool r = false;
    try {
      r = py_compare(e.ops[k], left, right);
    } catch (const TypeErr& err) {
      fail(e.line, err.what());
    }
    if (!r) return Val::boolean(false);
    left = std::move(right);
  }
  return Val::boolean(true);
}

// b if a else c; without an else, an undefined value that names the line.
Val Renderer::eval_cond(const Expr& e, const FrameP& f) {
  if (truthy(eval(*e.a, f))) return eval(*e.b, f);
  if (e.c) return eval(*e.c, f);
  return Val::undef("the inline if-expression on line " + std::to_string(e.line) +
                    " evaluated to false and no else section was defined.");
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

// ------------------------------------------------------------------------------------------------ access

Val Renderer::getattr(const Val& obj, const std::string& name, int line) {
  switch (obj.kind) {
    case Kind::Undefined:
      fail(line, obj.s + " (UndefinedError)");
    case Kind::Map: {
      if (has_method(obj, name) || is_unsafe_method(obj, name)) break;
      for (const auto& [k, v] : *obj.dict)
        if (k == name) return v;
      return Val::undef("'dict object' has no attribute '" + name + "'");
    }
    case Kind::Namespace: {
      for (const auto& [k, v] : obj.ns->attrs)
        if (k == name) return v;
      return Val::undef("'Namespace object' has no attribute '" + name + "'");
    }
    case Kind::Loop: {
      const LoopInfo& L = *obj.loop;
      auto n = static_cast<int64_t>(L.items->size());
      auto i = static_cast<int64_t>(L.index0);
      if (name == "index") return Val::integer(i + 1);
      if (name == "index0") return Val::integer(i);
      if (name == "revindex") return Val::integer(n - i);
      if (name == "revindex0") return Val::integer(n - i - 1);
      if (name == "first") return Val::boolean(i == 0);
      if (name == "last") return Val::boolean(i == n - 1);
      if (name == "length") return Val::integer(n);
      if (name == "depth") return Val::integer(1);
      if (name == "depth0") return Val::integer(0);
      if (name == "previtem")
        return i > 0 ? (*L.items)[static_cast<size_t>(i - 1)] : Val::undef("there is no previous item");
      if (name == "nextitem")
        return i + 1 < n ? (*L.items)[static_cast<size_t>(i + 1)] : Val::undef("there is no next item");
      break;
    }
    default:
      break;
  }
  if (is_unsafe_method(obj, name)) {
    Val u = Val::undef(std::string("access to attribute '") + name + "' of '" + type_name(obj) + "' object is unsafe.");
    u.flags = kUnsafe;
    return u;
  }
  if (has_method(obj, name)) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    Val self = obj;
    std::string mname = name;
    c->fn = [self, mname](Renderer& r, CallArgs& args, int l) { return call_method(r, self, mname, args, l); };
    Val v;
    v.kind = Kind::Callable;
    v.fn = std::move(c);
    return v;
  }
  std::string tn = obj.kind == Kind::None ? "None" : std::string(type_name(obj)) + " object";
  return Val::undef("'" + tn + "' has no attribute '" + name + "'");
}

static int64_t slice_index(const Val& v, const char* what) {
  if (v.is_intlike()) return v.as_int();
  throw TypeErr(std::string("slice ") + what + " must be an integer or None");
}

// Whether key is the (start, stop, step) tuple that eval_slice makes.
static bool is_slice(const Val& key) {
  return key.kind == Kind::Seq && (key.flags & kTuple) && key.list->size() == 3 && key.s == "<slice>";
}

// obj[start:stop:step] for a string (by code point) or a list or tuple, with Python's clamping of the indices.
static Val slice_of(const Val& obj, const Val& key) {
  if (obj.kind != Kind::String && !(obj.kind == Kind::Seq && !(obj.flags & kGen)))
    throw TypeErr(std::string("'") + type_name(obj) + "' object is not subscriptable");
  const Val& a = (*key.list)[0];
  const Val& b = (*key.list)[1];
  const Val& c = (*key.list)[2];
  int64_t stepv = c.kind == Kind::None ? 1 : slice_index(c, "step");
  if (stepv == 0) throw TypeErr("slice step cannot be zero");
  bool ascii = obj.kind == Kind::String && is_ascii(obj.s);
  std::u32string u;
  if (obj.kind == Kind::String && !ascii) u = utf8_decode(obj.s);
  auto len = static_cast<int64_t>(obj.kind == Kind::String ? (ascii ? obj.s.size() : u.size()) : obj.list->size());
  int64_t lower = stepv < 0 ? -1 : 0;
  int64_t upper = stepv < 0 ? len - 1 : len;
  auto norm = [&](const Val& x, int64_t dflt) {
    if (x.kind == Kind::None) return dflt;
    int64_t v = slice_index(x, "indices");
    if (v < 0) {
      v += len;
      if (v < lower) v = lower;
    } else if (v > upper) {
      v = upper;
    }
    return v;
  };
  int64_t start = norm(a, stepv < 0 ? upper : lower);
  int64_t stop = norm(b, stepv < 0 ? lower : upper);
  std::vector<size_t> idx;
  for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) idx.push_back(static_cast<size_t>(i));
  if (obj.kind == Kind::String) {
    std::string out;
    for (size_t i : idx) {
      if (ascii)
        out += obj.s[i];
      else
        append_utf8(out, u[i]);
    }
    return Val::str(std::move(out));
  }
  List out;
  for (size_t i : idx) out.push_back((*obj.list)[i]);
  return Val::make_list(std::move(out), obj.flags & kTuple);
}

// obj[key] for a list, tuple or string (by code point) and an integer key, negative ones from the end.
static Val element_at(const Val& obj, const Val& key) {
  int64_t i = key.as_int();
  if (obj.kind == Kind::Seq) {
    auto n = static_cast<int64_t>(obj.list->size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Val::undef("list object has no element " + std::to_string(key.as_int()));
    return (*obj.list)[static_cast<size_t>(i)];
  }
  if (is_ascii(obj.s)) {
    auto n = static_cast<int64_t>(obj.s.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Val::undef("str object has no element " + std::to_string(key.as_int()));
    return Val::str(std::string(1, obj.s[static_cast<size_t>(i)]));
  }
  std::u32string u = utf8_decode(obj.s);
  auto n = static_cast<int64_t>(u.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) return Val::undef("str object has no element " + std::to_string(key.as_int()));
  std::string out;
  append_utf8(out, u[static_cast<size_t>(i)]);
  return Val::str(std::move(out));
}

Val Renderer::getitem(const Val& obj, const Val& key, int line) {
  if (obj.kind == Kind::Undefined) fail(line, obj.s + " (UndefinedError)");
  if (is_slice(key)) return slice_of(obj, key);
  switch (obj.kind) {
    case Kind::Map:
      if (key.is_str()) {
        for (const auto& [k, v] : *obj.dict)
          if (k == key.s) return v;
        return getattr(obj, key.s, line).kind == Kind::Callable
                   ? getattr(obj, key.s, line)
                   : Val::undef("'dict object' has no attribute '" + key.s + "'");
      }
      return Val::undef("'dict object' has no element " + to_repr(key));
    case Kind::Seq:
    case Kind::String:
      if (key.is_str()) return getattr(obj, key.s, line);
      if (obj.kind == Kind::Seq && (obj.flags & kGen)) throw TypeErr("'generator' object is not subscriptable");
      if (!key.is_intlike())
        return Val::undef(std::string("'") + type_name(obj) + " object' has no element " + to_repr(key));
      return element_at(obj, key);
    default:
      if (key.is_str()) return getattr(obj, key.s, line);
      return Val::undef(std::string("'") + type_name(obj) + " object' has no element " + to_repr(key));
  }
}

}  // namespace ft::jinja::detail

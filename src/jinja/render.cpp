// Interpreter of ft::jinja: statements, expressions, scoping as jinja2 compiles them.
#include "jinja/render.h"

#include <algorithm>
#include <cmath>

namespace ft::jinja::detail {

void Renderer::fail(int line, const std::string& what) const {
  throw ft::Error(prog_.name + ":" + std::to_string(line) + ": " + what,
                  "the chat template failed while rendering; check the conversation against what the template "
                  "expects");
}

void Renderer::step(int line) {
  if (++steps_ > opts_.max_steps)
    fail(line, "template exceeded " + std::to_string(opts_.max_steps) + " steps (runaway loop?)");
}

void Renderer::write(const std::string& s, int line) {
  total_written_ += s.size();
  if (total_written_ > opts_.max_output_bytes)
    fail(line, "template output exceeded " + std::to_string(opts_.max_output_bytes) + " bytes");
  *out_ += s;
}

std::string Renderer::capture(const Body& body, const FrameP& f) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec(body, f);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

RenderResult Renderer::run(const Value& context) {
  if (!context.is_object()) throw ft::ConfigError(prog_.name + ": the render context must be a JSON object");
  globals_ = make_globals(opts_);
  auto root = std::make_shared<Frame>(nullptr);
  for (const auto& [k, v] : context.items()) root->vars[k] = from_json(v);
  exec(prog_.body, root);
  RenderResult r;
  r.text = std::move(root_out_);
  r.generation_spans = std::move(spans_);
  return r;
}

Flow Renderer::exec(const Body& body, const FrameP& f) {
  for (const auto& s : body) {
    Flow fl = exec_stmt(*s, f);
    if (fl != Flow::Normal) return fl;
  }
  return Flow::Normal;
}

Val Renderer::lookup(const std::string& name, const FrameP& f) const {
  for (const Frame* fr = f.get(); fr != nullptr; fr = fr->parent.get()) {
    auto it = fr->vars.find(name);
    if (it != fr->vars.end()) return it->second;
  }
  auto it = globals_.find(name);
  if (it != globals_.end()) return it->second;
  return Val::undef("'" + name + "' is undefined");
}

void Renderer::assign(const Expr& target, const Val& v, const FrameP& f, int line) {
  if (target.kind == EK::Name) {
    f->vars[target.name] = v;
    return;
  }
  if (target.kind == EK::Tuple) {
    std::vector<Val> items = iterate(v);
    if (items.size() != target.args.size())
      fail(line, items.size() < target.args.size()
                     ? "not enough values to unpack (expected " + std::to_string(target.args.size()) + ", got " +
                           std::to_string(items.size()) + ")"
                     : "too many values to unpack (expected " + std::to_string(target.args.size()) + ")");
    for (size_t k = 0; k < items.size(); ++k) assign(*target.args[k], items[k], f, line);
    return;
  }
  // {% set ns.attr = v %}
  Val ns = lookup(target.a->name, f);
  if (ns.kind != Kind::Namespace) fail(line, "cannot assign attribute on non-namespace object");
  if (!target.name.empty() && target.name[0] == '_')
    fail(line, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got " +
                   py_str_repr(target.name) + ". Please rename the attribute. (SecurityError)");
  auto& attrs = ns.ns->attrs;
  auto it = std::find_if(attrs.begin(), attrs.end(), [&](const auto& p) { return p.first == target.name; });
  if (it != attrs.end())
    it->second = v;
  else
    attrs.emplace_back(target.name, v);
}

Flow Renderer::exec_stmt(const Stmt& s, const FrameP& f) {
  try {
    switch (s.kind) {
      case SK::Output:
        step(s.line);
        write(s.text, s.line);
        return Flow::Normal;
      case SK::Print: {
        step(s.line);
        Val v = eval(*s.expr, f);
        write(to_str(v), s.line);
        return Flow::Normal;
      }
      case SK::If: {
        if (truthy(eval(*s.expr, f))) return exec(s.body, f);
        return exec(s.else_body, f);
      }
      case SK::For: return exec_for(s, f);
      case SK::Set: assign(*s.target, eval(*s.expr, f), f, s.line); return Flow::Normal;
      case SK::SetBlock: {
        Val v = Val::str(capture(s.body, std::make_shared<Frame>(f)));
        if (s.expr) {
          const Val* saved = filter_input_;
          filter_input_ = &v;
          Val r = eval(*s.expr, f);
          filter_input_ = saved;
          v = r;
        }
        assign(*s.target, v, f, s.line);
        return Flow::Normal;
      }
      case SK::Macro: f->vars[s.macro->name] = make_macro(s.macro, f); return Flow::Normal;
      case SK::CallBlock: {
        const Expr& call = *s.expr;
        Val callee = eval(*call.a, f);
        CallArgs args = eval_args(call, f);
        Val caller = make_macro(s.macro, f);
        if (callee.kind != Kind::Callable) fail(s.line, "{% call %} needs a macro");
        args.kw.emplace_back("caller", caller);
        write(to_str(call_value(callee, args, s.line)), s.line);
        return Flow::Normal;
      }
      case SK::FilterBlock: {
        Val body = Val::str(capture(s.body, std::make_shared<Frame>(f)));
        const Val* saved = filter_input_;
        filter_input_ = &body;
        Val r = eval(*s.expr, f);
        filter_input_ = saved;
        write(to_str(r), s.line);
        return Flow::Normal;
      }
      case SK::With: {
        auto inner = std::make_shared<Frame>(f);
        for (size_t k = 0; k < s.targets.size(); ++k) assign(*s.targets[k], eval(*s.values[k], f), inner, s.line);
        return exec(s.body, inner);
      }
      case SK::Break: return Flow::Break;
      case SK::Continue: return Flow::Continue;
      case SK::Generation: {
        // jinja2 renders the body as a caller() macro into a buffer; transformers' AssistantTracker then reports
        // [len(text yielded so far), + len(body)). Inside a capture that is not the final position: we report
        // exactly what transformers reports.
        if (++depth_ > opts_.max_call_depth) fail(s.line, "maximum recursion depth exceeded");
        std::string body = capture(s.body, std::make_shared<Frame>(f));
        --depth_;
        size_t start = root_out_.size();
        spans_.emplace_back(start, start + body.size());
        write(body, s.line);
        return Flow::Normal;
      }
    }
  } catch (const TypeErr& e) {
    fail(s.line, e.what());
  }
  return Flow::Normal;
}

Flow Renderer::exec_for(const Stmt& s, const FrameP& f) {
  Val seq = eval(*s.expr, f);
  std::vector<Val> items = iterate(seq);
  if (s.cond) {
    std::vector<Val> kept;
    for (auto& it : items) {
      step(s.line);
      auto tmp = std::make_shared<Frame>(f);
      assign(*s.target, it, tmp, s.line);
      if (truthy(eval(*s.cond, tmp))) kept.push_back(std::move(it));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(s.else_body, f);
  auto shared = std::make_shared<const List>(std::move(items));
  for (size_t k = 0; k < shared->size(); ++k) {
    step(s.line);
    auto inner = std::make_shared<Frame>(f);
    assign(*s.target, (*shared)[k], inner, s.line);
    auto info = std::make_shared<LoopInfo>();
    info->items = shared;
    info->index0 = k;
    Val lv;
    lv.kind = Kind::Loop;
    lv.loop = info;
    inner->vars["loop"] = lv;
    Flow fl = exec(s.body, inner);
    if (fl == Flow::Break) break;
  }
  return Flow::Normal;
}

Val Renderer::make_macro(const std::shared_ptr<MacroDef>& m, const FrameP& closure) {
  auto c = std::make_shared<Callable>();
  c->name = m->name;
  std::weak_ptr<Frame> weak = closure;  // a macro stored in its own frame must not keep the frame alive
  c->fn = [m, weak](Renderer& r, CallArgs& args, int line) {
    FrameP fr = weak.lock();
    if (!fr) r.fail(line, "macro '" + m->name + "' called after its scope ended");
    return r.call_macro(*m, fr, args, line, nullptr);
  };
  Val v;
  v.kind = Kind::Callable;
  v.fn = std::move(c);
  return v;
}

Val Renderer::call_macro(const MacroDef& m, const FrameP& closure, CallArgs& args, int line, const Val*) {
  step(line);
  if (++depth_ > opts_.max_call_depth)
    fail(line, "maximum recursion depth exceeded (" + std::to_string(opts_.max_call_depth) +
                   " nested macro calls)");
  auto f = std::make_shared<Frame>(closure);
  size_t np = m.params.size();
  size_t nd = m.defaults.size();
  std::vector<bool> done(np, false);
  for (size_t k = 0; k < np && k < args.pos.size(); ++k) {
    f->vars[m.params[k]] = args.pos[k];
    done[k] = true;
  }
  Dict extra_kw;
  Val caller;
  bool have_caller = false;
  for (auto& [key, v] : args.kw) {
    auto it = std::find(m.params.begin(), m.params.end(), key);
    if (it != m.params.end()) {
      size_t idx = static_cast<size_t>(it - m.params.begin());
      if (done[idx]) fail(line, "macro '" + m.name + "' got multiple values for argument '" + key + "'");
      f->vars[key] = v;
      done[idx] = true;
    } else if (key == "caller") {
      caller = v;
      have_caller = true;
    } else {
      extra_kw.emplace_back(key, v);
    }
  }
  for (size_t k = 0; k < np; ++k) {
    if (done[k]) continue;
    if (k >= np - nd) {
      f->vars[m.params[k]] = eval(*m.defaults[k - (np - nd)], f);
    } else {
      f->vars[m.params[k]] = Val::undef("parameter '" + m.params[k] + "' was not provided");
    }
  }
  if (args.pos.size() > np) {
    if (!m.uses_varargs)
      fail(line, "macro '" + m.name + "' takes not more than " + std::to_string(np) + " argument(s)");
    List rest(args.pos.begin() + static_cast<std::ptrdiff_t>(np), args.pos.end());
    f->vars["varargs"] = Val::make_list(std::move(rest), kTuple);
  } else if (m.uses_varargs) {
    f->vars["varargs"] = Val::make_list({}, kTuple);
  }
  if (!extra_kw.empty() && !m.uses_kwargs)
    fail(line, "macro '" + m.name + "' takes no keyword argument '" + extra_kw[0].first + "'");
  if (m.uses_kwargs) f->vars["kwargs"] = Val::make_dict(std::move(extra_kw));
  if (have_caller) {
    if (!m.uses_caller) fail(line, "macro '" + m.name + "' takes no keyword argument 'caller'");
    f->vars["caller"] = caller;
  } else if (m.uses_caller && f->vars.find("caller") == f->vars.end()) {
    f->vars["caller"] = Val::undef("No caller defined");
  }
  std::string outbuf = capture(m.body, f);
  --depth_;
  return Val::str(std::move(outbuf));
}

Val Renderer::call_value(const Val& callee, CallArgs& args, int line) {
  if (callee.kind == Kind::Callable) return callee.fn->fn(*this, args, line);
  if (callee.kind == Kind::Undefined) fail(line, callee.s + ((callee.flags & kUnsafe) ? " (SecurityError)" : " (UndefinedError)"));
  fail(line, std::string("'") + type_name(callee) + "' object is not callable");
}

CallArgs Renderer::eval_args(const Expr& e, const FrameP& f) {
  CallArgs a;
  for (const auto& x : e.args) a.pos.push_back(eval(*x, f));
  for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x, f));
  return a;
}

Val Renderer::getattr(const Val& obj, const std::string& name, int line) {
  switch (obj.kind) {
    case Kind::Undefined: fail(line, obj.s + " (UndefinedError)");
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
    default: break;
  }
  if (is_unsafe_method(obj, name)) {
    Val u = Val::undef(std::string("access to attribute '") + name + "' of '" + type_name(obj) +
                       "' object is unsafe.");
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

Val Renderer::getitem(const Val& obj, const Val& key, int line) {
  if (obj.kind == Kind::Undefined) fail(line, obj.s + " (UndefinedError)");
  if (key.kind == Kind::Seq && (key.flags & kTuple) && key.list->size() == 3 && key.s == "<slice>") {
    // slice
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
          utf8_append(out, u[i]);
      }
      return Val::str(std::move(out));
    }
    List out;
    for (size_t i : idx) out.push_back((*obj.list)[i]);
    return Val::make_list(std::move(out), obj.flags & kTuple);
  }
  switch (obj.kind) {
    case Kind::Map:
      if (key.is_str()) {
        for (const auto& [k, v] : *obj.dict)
          if (k == key.s) return v;
        return getattr(obj, key.s, line).kind == Kind::Callable ? getattr(obj, key.s, line)
                                                                 : Val::undef("'dict object' has no attribute '" +
                                                                              key.s + "'");
      }
      return Val::undef("'dict object' has no element " + to_repr(key));
    case Kind::Seq:
    case Kind::String: {
      if (key.is_str()) return getattr(obj, key.s, line);
      if (obj.kind == Kind::Seq && (obj.flags & kGen))
        throw TypeErr("'generator' object is not subscriptable");
      if (!key.is_intlike()) return Val::undef(std::string("'") + type_name(obj) + " object' has no element " + to_repr(key));
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
      utf8_append(out, u[static_cast<size_t>(i)]);
      return Val::str(std::move(out));
    }
    default:
      if (key.is_str()) return getattr(obj, key.s, line);
      return Val::undef(std::string("'") + type_name(obj) + " object' has no element " + to_repr(key));
  }
}

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
      if (n > 0 && unit * static_cast<size_t>(n) > opts_.max_output_bytes)
        throw TypeErr("repetition result too large");
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
    if (a.is_str()) return percent_format(a.s, b);
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
    case EK::Const: return e.value;
    case EK::Name: return lookup(e.name, f);
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
    case EK::GetAttr: return getattr(eval(*e.a, f), e.name, e.line);
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
    case EK::Call: return eval_call(e, f);
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
      if (!v.is_num()) fail(e.line, std::string("bad operand type for unary ") + (e.kind == EK::Neg ? "-" : "+") +
                                        ": '" + type_name(v) + "'");
      if (e.kind == EK::Pos) return v.kind == Kind::Float ? v : Val::integer(v.as_int());
      return v.kind == Kind::Float ? Val::real(-v.f) : Val::integer(-v.as_int());
    }
    case EK::Not: return Val::boolean(!truthy(eval(*e.a, f)));
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
              if (op == "<") r = py_lt(left, right);
              else if (op == ">") r = py_lt(right, left);
              else if (op == "<=") r = py_lt(left, right) || py_eq(left, right);
              else r = py_lt(right, left) || py_eq(left, right);
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

namespace ft::jinja {

Template::Template(std::string source, std::string name)
    : name_(std::move(name)), program_(detail::parse_template(source, name_)) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

RenderResult Template::render(const Value& context) const { return render(context, RenderOptions{}); }

RenderResult Template::render(const Value& context, const RenderOptions& options) const {
  detail::Renderer r(*program_, options);
  return r.run(context);
}

Value make_chat_context(const Value& messages, const Value& tools, const Value& documents, bool add_generation_prompt,
                        const Value& extra) {
  if (!messages.is_array()) throw ConfigError("chat messages must be a JSON array of objects");
  Value msgs = Value::array();
  static const char* kReasoning[] = {"reasoning_content", "thinking", "reasoning"};
  for (const auto& m : messages) {
    if (!m.is_object()) throw ConfigError("chat messages must be JSON objects, got: " + m.dump());
    Value clean = Value::object();
    for (const auto& [k, v] : m.items())
      if (!v.is_null()) clean[k] = v;
    const Value* reasoning = nullptr;
    for (const char* key : kReasoning) {
      auto it = clean.find(key);
      if (it != clean.end() && !it->is_null()) {
        reasoning = &*it;
        break;
      }
    }
    if (reasoning != nullptr) {
      // {"thinking": r, **message, "reasoning_content": r}
      Value r = *reasoning;
      Value aliased = Value::object();
      aliased["thinking"] = r;
      for (const auto& [k, v] : clean.items()) aliased[k] = v;
      aliased["reasoning_content"] = r;
      clean = std::move(aliased);
    }
    msgs.push_back(std::move(clean));
  }
  Value ctx = Value::object();
  ctx["messages"] = std::move(msgs);
  ctx["tools"] = tools;
  ctx["documents"] = documents;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (!extra.is_null()) {
    if (!extra.is_object()) throw ConfigError("chat template kwargs must be a JSON object");
    for (const auto& [k, v] : extra.items()) ctx[k] = v;
  }
  return ctx;
}

}  // namespace ft::jinja

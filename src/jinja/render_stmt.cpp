// The renderer of ft::jinja, statements: output and its limits, scoping and assignment, each statement kind, for
// loops, macros and calls, as jinja2 compiles them.
#include <algorithm>

#include "jinja/render.h"

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

Renderer::~Renderer() {
  for (const auto& ns : namespaces_) ns->attrs.clear();  // breaks cycles through namespace attributes
}

std::shared_ptr<Namespace> Renderer::new_namespace() {
  namespaces_.push_back(std::make_shared<Namespace>());
  return namespaces_.back();
}

RenderResult Renderer::run(const Value& context) {
  if (!context.is_object()) throw ft::ConfigError(prog_.name + ": the render context must be a JSON object");
  globals_ = make_globals(opts_);
  auto root = std::make_shared<Frame>(nullptr);
  for (const auto& [k, v] : context.items()) {
    try {
      root->vars[k] = from_json(v);
    } catch (const TypeErr& e) {
      throw ft::Error(prog_.name + ": the render context's '" + k + "': " + e.what());
    }
  }
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
  if (v.depth >= kMaxNesting) {
    fail(line, "values nested more than " + std::to_string(kMaxNesting) + " levels deep are not supported");
  }
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
      case SK::For:
        return exec_for(s, f);
      case SK::Set:
        assign(*s.target, eval(*s.expr, f), f, s.line);
        return Flow::Normal;
      case SK::SetBlock:
        return exec_set_block(s, f);
      case SK::Macro:
        f->vars[s.macro->name] = make_macro(s.macro, f);
        return Flow::Normal;
      case SK::CallBlock:
        return exec_call_block(s, f);
      case SK::FilterBlock:
        return exec_filter_block(s, f);
      case SK::With:
        return exec_with(s, f);
      case SK::Break:
        return Flow::Break;
      case SK::Continue:
        return Flow::Continue;
      case SK::Generation:
        return exec_generation(s, f);
    }
  } catch (const TypeErr& e) {
    fail(s.line, e.what());
  }
  return Flow::Normal;
}

// The filter chain of {% filter %} or {% set x | f %}, applied to the text its body captured.
Val Renderer::filter_captured(const Expr& chain, const Val& captured, const FrameP& f) {
  const Val* saved = filter_input_;
  filter_input_ = &captured;
  Val r = eval(chain, f);
  filter_input_ = saved;
  return r;
}

// {% set x %}...{% endset %}, with an optional filter chain.
Flow Renderer::exec_set_block(const Stmt& s, const FrameP& f) {
  Val v = Val::str(capture(s.body, std::make_shared<Frame>(f)));
  if (s.expr) v = filter_captured(*s.expr, v, f);
  assign(*s.target, v, f, s.line);
  return Flow::Normal;
}

// {% call m(args) %}...{% endcall %}: m called with the body as its caller().
Flow Renderer::exec_call_block(const Stmt& s, const FrameP& f) {
  const Expr& call = *s.expr;
  Val callee = eval(*call.a, f);
  CallArgs args = eval_args(call, f);
  Val caller = make_macro(s.macro, f);
  if (callee.kind != Kind::Callable) fail(s.line, "{% call %} needs a macro");
  args.kw.emplace_back("caller", caller);
  write(to_str(call_value(callee, args, s.line)), s.line);
  return Flow::Normal;
}

Flow Renderer::exec_filter_block(const Stmt& s, const FrameP& f) {
  Val body = Val::str(capture(s.body, std::make_shared<Frame>(f)));
  Val r = filter_captured(*s.expr, body, f);
  write(to_str(r), s.line);
  return Flow::Normal;
}

Flow Renderer::exec_with(const Stmt& s, const FrameP& f) {
  auto inner = std::make_shared<Frame>(f);
  for (size_t k = 0; k < s.targets.size(); ++k) assign(*s.targets[k], eval(*s.values[k], f), inner, s.line);
  return exec(s.body, inner);
}

// {% generation %}: jinja2 renders the body as a caller() macro into a buffer; transformers' AssistantTracker then
// reports [len(text yielded so far), + len(body)). Inside a capture that is not the final position: we report
// exactly what transformers reports.
Flow Renderer::exec_generation(const Stmt& s, const FrameP& f) {
  if (++depth_ > opts_.max_call_depth) fail(s.line, "maximum recursion depth exceeded");
  std::string body = capture(s.body, std::make_shared<Frame>(f));
  --depth_;
  size_t start = root_out_.size();
  spans_.emplace_back(start, start + body.size());
  write(body, s.line);
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
    fail(line, "maximum recursion depth exceeded (" + std::to_string(opts_.max_call_depth) + " nested macro calls)");
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
  if (callee.kind == Kind::Undefined)
    fail(line, callee.s + ((callee.flags & kUnsafe) ? " (SecurityError)" : " (UndefinedError)"));
  fail(line, std::string("'") + type_name(callee) + "' object is not callable");
}

CallArgs Renderer::eval_args(const Expr& e, const FrameP& f) {
  CallArgs a;
  for (const auto& x : e.args) a.pos.push_back(eval(*x, f));
  for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x, f));
  return a;
}

}  // namespace ft::jinja::detail

// Parser of ft::jinja, statements: template data, {{ }} and the tags (for, if, set, macro, call, filter, with,
// generation), following jinja2's parser.py; and the entry point parse_template.
#include <set>

#include "jinja/parser.h"

namespace ft::jinja::detail {

bool Parser::at_end_tokens(const std::vector<const char*>& ends) const {
  for (const char* e : ends)
    if (is_name(e)) return true;
  return false;
}

Body Parser::subparse(const std::vector<const char*>& ends) {
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == TT::Eof) return body;
    if (t.type == TT::Data) {
      auto s = std::make_unique<Stmt>();
      s->kind = SK::Output;
      s->line = t.line;
      s->text = t.value;
      body.push_back(std::move(s));
      next();
    } else if (t.type == TT::VarBegin) {
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = SK::Print;
      s->line = cur().line;
      s->expr = parse_tuple(false, true, {}, false);
      expect(TT::VarEnd, "'}}'");
      body.push_back(std::move(s));
    } else if (t.type == TT::BlockBegin) {
      next();
      if (!ends.empty() && at_end_tokens(ends)) return body;
      body.push_back(parse_statement());
      expect(TT::BlockEnd, "'%}'");
    } else {
      fail(t, "unexpected '" + describe(t) + "'");
    }
  }
}

// Parses the body after a tag up to one of `ends`; leaves the end name current unless drop_needle.
Body Parser::parse_statements(const std::vector<const char*>& ends, bool drop_needle, const Token& opener) {
  skip_op(":");
  expect(TT::BlockEnd, "'%}'");
  Body body = subparse(ends);
  if (cur().type == TT::Eof) {
    std::string want;
    for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
    fail(opener, "unexpected end of template: the '" + opener.value + "' block opened here needs " + want);
  }
  if (drop_needle) next();
  return body;
}

StmtP Parser::make_stmt(SK k, const Token& t) {
  auto s = std::make_unique<Stmt>();
  s->kind = k;
  s->line = t.line;
  return s;
}

StmtP Parser::parse_statement() {
  Depth d(*this);
  const Token& t = cur();
  if (t.type != TT::Name) fail(t, "tag name expected");
  const std::string& kw = t.value;
  if (kw == "for") return parse_for();
  if (kw == "if") return parse_if();
  if (kw == "set") return parse_set();
  if (kw == "macro") return parse_macro();
  if (kw == "call") return parse_call_block();
  if (kw == "filter") return parse_filter_block();
  if (kw == "with") return parse_with();
  if (kw == "print") {
    Token tok = next();
    auto s = make_stmt(SK::Print, tok);
    s->expr = parse_tuple(false, true, {}, false);
    return s;
  }
  if (kw == "break" || kw == "continue") {
    Token tok = next();
    if (loop_depth_ == 0) fail(tok, "'" + kw + "' outside of a loop");
    return make_stmt(kw == "break" ? SK::Break : SK::Continue, tok);
  }
  if (kw == "generation") {
    Token tok = next();
    auto s = make_stmt(SK::Generation, tok);
    int saved = loop_depth_;
    loop_depth_ = 0;  // the body is a caller() macro in jinja2
    s->body = parse_statements({"endgeneration"}, true, tok);
    loop_depth_ = saved;
    return s;
  }
  static const std::set<std::string> unsupported = {"block",      "extends", "include", "import",   "from",
                                                    "autoescape", "do",      "trans",   "endblock", "raw"};
  if (unsupported.count(kw)) fail(t, "unsupported tag '" + kw + "'");
  fail(t, "unknown tag '" + kw + "'");
}

StmtP Parser::parse_for() {
  Token tok = next();
  auto s = make_stmt(SK::For, tok);
  s->target = parse_assign_target(true, {"in"}, false);
  if (!skip_name("in")) fail(cur(), "expected 'in' in for loop, got '" + describe(cur()) + "'");
  s->expr = parse_tuple(false, false, {"recursive"}, false);
  if (skip_name("if")) s->cond = parse_expression(true);
  if (is_name("recursive")) fail(cur(), "unsupported: recursive for loops");
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false, tok);
  --loop_depth_;
  if (next().value == "else") s->else_body = parse_statements({"endfor"}, true, tok);
  return s;
}

StmtP Parser::parse_if() {
  Token tok = next();
  auto s = make_stmt(SK::If, tok);
  s->expr = parse_tuple(false, false, {}, false);
  s->body = parse_statements({"elif", "else", "endif"}, false, tok);
  Stmt* tail = s.get();
  while (true) {
    Token t = next();
    if (t.value == "elif") {
      auto e = make_stmt(SK::If, t);
      e->expr = parse_tuple(false, false, {}, false);
      e->body = parse_statements({"elif", "else", "endif"}, false, tok);
      Stmt* raw = e.get();
      tail->else_body.push_back(std::move(e));
      tail = raw;
    } else if (t.value == "else") {
      tail->else_body = parse_statements({"endif"}, true, tok);
      break;
    } else {
      break;
    }
  }
  return s;
}

StmtP Parser::parse_set() {
  Token tok = next();
  ExprP target = parse_assign_target(true, {}, true);
  if (skip_op("=")) {
    auto s = make_stmt(SK::Set, tok);
    s->target = std::move(target);
    s->expr = parse_tuple(false, true, {}, false);
    return s;
  }
  auto s = make_stmt(SK::SetBlock, tok);
  if (target->kind != EK::Name) fail(tok, "a {% set %} block needs a plain name");
  s->target = std::move(target);
  if (is_op("|")) s->expr = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true, tok);
  return s;
}

void Parser::parse_signature(MacroDef& m) {
  expect_op("(");
  while (!is_op(")")) {
    if (!m.params.empty()) expect_op(",");
    if (is_op(")")) break;
    Token t = cur();
    std::string p = expect_name();
    m.params.push_back(p);
    if (skip_op("=")) {
      m.defaults.push_back(parse_expression(true));
    } else if (!m.defaults.empty()) {
      fail(t, "non-default argument follows default argument");
    }
  }
  expect_op(")");
}

StmtP Parser::parse_macro() {
  Token tok = next();
  auto s = make_stmt(SK::Macro, tok);
  s->macro = std::make_shared<MacroDef>();
  s->macro->name = expect_name();
  parse_signature(*s->macro);
  int saved = loop_depth_;
  loop_depth_ = 0;
  macro_stack_.push_back(s->macro.get());
  s->macro->body = parse_statements({"endmacro"}, true, tok);
  macro_stack_.pop_back();
  loop_depth_ = saved;
  return s;
}

StmtP Parser::parse_call_block() {
  Token tok = next();
  auto s = make_stmt(SK::CallBlock, tok);
  s->macro = std::make_shared<MacroDef>();
  s->macro->name = "caller";
  if (is_op("(")) parse_signature(*s->macro);
  s->expr = parse_expression(true);
  if (s->expr->kind != EK::Call) fail(tok, "expected a call after {% call %}");
  int saved = loop_depth_;
  loop_depth_ = 0;
  macro_stack_.push_back(s->macro.get());
  s->macro->body = parse_statements({"endcall"}, true, tok);
  macro_stack_.pop_back();
  loop_depth_ = saved;
  return s;
}

StmtP Parser::parse_filter_block() {
  Token tok = next();
  auto s = make_stmt(SK::FilterBlock, tok);
  s->expr = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"}, true, tok);
  return s;
}

StmtP Parser::parse_with() {
  Token tok = next();
  auto s = make_stmt(SK::With, tok);
  while (cur().type != TT::BlockEnd) {
    if (!s->targets.empty()) expect_op(",");
    s->targets.push_back(parse_assign_target(true, {}, false));
    expect_op("=");
    s->values.push_back(parse_expression(true));
  }
  s->body = parse_statements({"endwith"}, true, tok);
  return s;
}

ExprP Parser::parse_assign_target(bool with_tuple, const std::vector<const char*>& extra_end, bool with_namespace) {
  if (with_namespace && cur().type == TT::Name && look().type == TT::Op && look().value == ".") {
    Token t = cur();
    auto n = node(EK::GetAttr, t);
    auto obj = node(EK::Name, t);
    obj->name = next().value;
    next();
    n->name = expect_name();
    n->a = std::move(obj);
    return n;
  }
  ExprP target = with_tuple ? parse_tuple(true, true, extra_end, false) : parse_primary();
  auto check = [&](const Expr& e) {
    if (e.kind != EK::Name) fail(cur(), "can't assign to this expression");
    if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" || e.name == "False" ||
        e.name == "None")
      fail(cur(), "can't assign to '" + e.name + "'");
  };
  if (target->kind == EK::Tuple) {
    for (auto& x : target->args) check(*x);
  } else {
    check(*target);
  }
  return target;
}

std::shared_ptr<Program> parse_template(const std::string& source, const std::string& name) {
  Lexer lexer(source, name);
  Parser parser(lexer.run(), name);
  auto prog = std::make_shared<Program>();
  prog->name = name;
  prog->body = parser.parse_all();
  return prog;
}

}  // namespace ft::jinja::detail

// Parser of ft::jinja, expressions: operators by precedence, literals, filters, tests, calls and subscripts, following
// jinja2's parser.py.
#include "jinja/parser.h"

namespace ft::jinja::detail {

bool Parser::is_tuple_end(const std::vector<const char*>& extra_end) const {
  if (cur().type == TT::VarEnd || cur().type == TT::BlockEnd || is_op(")")) return true;
  return at_end_tokens(extra_end);
}

ExprP Parser::parse_tuple(bool simplified, bool with_condexpr, const std::vector<const char*>& extra_end,
                          bool explicit_parens) {
  Token start = cur();
  std::vector<ExprP> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    if (simplified)
      args.push_back(parse_primary());
    else
      args.push_back(parse_expression(with_condexpr));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) fail(cur(), "expected an expression, got '" + describe(cur()) + "'");
  }
  auto n = node(EK::Tuple, start);
  n->args = std::move(args);
  return n;
}

ExprP Parser::parse_expression(bool with_condexpr) {
  Depth d(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprP Parser::parse_condexpr() {
  ExprP expr1 = parse_or();
  while (is_name("if")) {
    Token t = next();
    auto n = node(EK::CondExpr, t);
    n->a = parse_or();
    if (skip_name("else")) n->c = parse_condexpr();
    n->b = std::move(expr1);
    expr1 = std::move(n);
  }
  return expr1;
}

ExprP Parser::parse_or() {
  ExprP left = parse_and();
  while (is_name("or")) {
    Token t = next();
    auto n = node(EK::Or, t);
    n->a = std::move(left);
    n->b = parse_and();
    left = std::move(n);
  }
  return left;
}

ExprP Parser::parse_and() {
  ExprP left = parse_not();
  while (is_name("and")) {
    Token t = next();
    auto n = node(EK::And, t);
    n->a = std::move(left);
    n->b = parse_not();
    left = std::move(n);
  }
  return left;
}

ExprP Parser::parse_not() {
  if (is_name("not")) {
    Depth d(*this);
    Token t = next();
    auto n = node(EK::Not, t);
    n->a = parse_not();
    return n;
  }
  return parse_compare();
}

ExprP Parser::parse_compare() {
  Token start = cur();
  ExprP expr = parse_math1();
  ExprP cmp;
  while (true) {
    std::string op;
    if (cur().type == TT::Op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                 cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
      op = next().value;
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && look().type == TT::Name && look().value == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = node(EK::Compare, start);
      cmp->a = std::move(expr);
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(expr);
}

ExprP Parser::binary(const std::string& op, ExprP l, ExprP r, const Token& t) {
  auto n = node(EK::Binary, t);
  n->name = op;
  n->a = std::move(l);
  n->b = std::move(r);
  return n;
}

ExprP Parser::parse_math1() {
  ExprP left = parse_concat();
  while (is_op("+") || is_op("-")) {
    Token t = next();
    left = binary(t.value, std::move(left), parse_concat(), t);
  }
  return left;
}

ExprP Parser::parse_concat() {
  Token start = cur();
  ExprP first = parse_math2();
  if (!is_op("~")) return first;
  auto n = node(EK::Concat, start);
  n->args.push_back(std::move(first));
  while (skip_op("~")) n->args.push_back(parse_math2());
  return n;
}

ExprP Parser::parse_math2() {
  ExprP left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    Token t = next();
    left = binary(t.value, std::move(left), parse_pow(), t);
  }
  return left;
}

ExprP Parser::parse_pow() {
  ExprP left = parse_unary(true);
  while (is_op("**")) {
    Token t = next();
    left = binary("**", std::move(left), parse_unary(true), t);
  }
  return left;
}

ExprP Parser::parse_unary(bool with_filter) {
  Depth d(*this);
  ExprP n;
  if (is_op("-") || is_op("+")) {
    Token t = next();
    n = node(t.value == "-" ? EK::Neg : EK::Pos, t);
    n->a = parse_unary(false);
  } else {
    n = parse_primary();
  }
  n = parse_postfix(std::move(n));
  if (with_filter) n = parse_filter_expr(std::move(n));
  return n;
}

// A name: true/false/none (either case) as constants, else a variable (noting the macro's varargs, kwargs and
// caller).
ExprP Parser::parse_name() {
  Token tok = next();
  auto n = node(EK::Const, tok);
  if (tok.value == "true" || tok.value == "True") {
    n->value = Val::boolean(true);
  } else if (tok.value == "false" || tok.value == "False") {
    n->value = Val::boolean(false);
  } else if (tok.value == "none" || tok.value == "None") {
    n->value = Val::none();
  } else {
    n->kind = EK::Name;
    n->name = tok.value;
    if (is_unsupported_global(tok.value)) fail(tok, "unsupported global '" + tok.value + "'");
    if (!macro_stack_.empty()) {
      MacroDef* m = macro_stack_.back();
      if (tok.value == "varargs") m->uses_varargs = true;
      if (tok.value == "kwargs") m->uses_kwargs = true;
      if (tok.value == "caller") m->uses_caller = true;
    }
  }
  return n;
}

ExprP Parser::parse_list_literal() {
  Token tok = next();
  auto n = node(EK::ListLit, tok);
  while (!is_op("]")) {
    if (!n->args.empty()) expect_op(",");
    if (is_op("]")) break;
    n->args.push_back(parse_expression(true));
  }
  expect_op("]");
  return n;
}

ExprP Parser::parse_dict_literal() {
  Token tok = next();
  auto n = node(EK::DictLit, tok);
  while (!is_op("}")) {
    if (!n->args.empty()) expect_op(",");
    if (is_op("}")) break;
    n->args.push_back(parse_expression(true));
    expect_op(":");
    n->args.push_back(parse_expression(true));
  }
  expect_op("}");
  return n;
}

ExprP Parser::parse_primary() {
  Depth d(*this);
  const Token& t = cur();
  if (t.type == TT::Name) return parse_name();
  if (t.type == TT::String) {
    Token tok = next();
    auto n = node(EK::Const, tok);
    std::string s = tok.value;
    while (cur().type == TT::String) s += next().value;
    n->value = Val::str(std::move(s));
    return n;
  }
  if (t.type == TT::Int || t.type == TT::Float) {
    Token tok = next();
    auto n = node(EK::Const, tok);
    n->value = tok.type == TT::Int ? Val::integer(tok.ival) : Val::real(tok.fval);
    return n;
  }
  if (is_op("(")) {
    next();
    ExprP n = parse_tuple(false, true, {}, true);
    expect_op(")");
    return n;
  }
  if (is_op("[")) return parse_list_literal();
  if (is_op("{")) return parse_dict_literal();
  fail(t, "unexpected '" + describe(t) + "'");
}

ExprP Parser::parse_postfix(ExprP n) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      n = parse_subscript(std::move(n));
    } else if (is_op("(")) {
      n = parse_call(std::move(n));
    } else {
      break;
    }
  }
  return n;
}

ExprP Parser::parse_filter_expr(ExprP n) {
  while (true) {
    if (is_op("|")) {
      n = parse_filter(std::move(n), false);
    } else if (is_name("is")) {
      n = parse_test(std::move(n));
    } else if (is_op("(")) {
      n = parse_call(std::move(n));
    } else {
      break;
    }
  }
  return n;
}

ExprP Parser::parse_subscript(ExprP obj) {
  Token t = next();
  if (t.value == ".") {
    Token a = next();
    if (a.type == TT::Name) {
      auto n = node(EK::GetAttr, a);
      n->name = a.value;
      n->a = std::move(obj);
      return n;
    }
    if (a.type != TT::Int) fail(a, "expected name or number after '.'");
    auto n = node(EK::GetItem, a);
    n->a = std::move(obj);
    n->b = node(EK::Const, a);
    n->b->value = Val::integer(a.ival);
    return n;
  }
  std::vector<ExprP> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  auto n = node(EK::GetItem, t);
  n->a = std::move(obj);
  if (args.size() == 1) {
    n->b = std::move(args[0]);
  } else {
    n->b = node(EK::Tuple, t);
    n->b->args = std::move(args);
  }
  return n;
}

ExprP Parser::parse_subscribed() {
  Token t = cur();
  std::vector<ExprP> parts;
  if (is_op(":")) {
    next();
    parts.emplace_back();
  } else {
    ExprP e = parse_expression(true);
    if (!is_op(":")) return e;
    next();
    parts.push_back(std::move(e));
  }
  if (is_op(":") || is_op("]") || is_op(","))
    parts.emplace_back();
  else
    parts.push_back(parse_expression(true));
  if (is_op(":")) {
    next();
    if (is_op("]") || is_op(","))
      parts.emplace_back();
    else
      parts.push_back(parse_expression(true));
  } else {
    parts.emplace_back();
  }
  auto n = node(EK::Slice, t);
  n->args = std::move(parts);
  return n;
}

void Parser::parse_call_args(Expr& n) {
  expect_op("(");
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) fail(cur(), "unsupported: *args / **kwargs in calls");
    if (cur().type == TT::Name && look().type == TT::Op && look().value == "=") {
      std::string key = next().value;
      next();
      n.kwargs.emplace_back(key, parse_expression(true));
    } else {
      if (!n.kwargs.empty()) fail(cur(), "invalid argument syntax: positional argument after keyword argument");
      n.args.push_back(parse_expression(true));
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprP Parser::parse_call(ExprP callee) {
  Token t = cur();
  auto n = node(EK::Call, t);
  if (callee->kind == EK::GetAttr && !is_supported_method(callee->name))
    fail(t, "unsupported method '" + callee->name + "()'");
  n->a = std::move(callee);
  parse_call_args(*n);
  return n;
}

ExprP Parser::parse_filter(ExprP input, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    Token t = cur();
    std::string fname = expect_name();
    while (is_op(".")) {
      next();
      fname += "." + expect_name();
    }
    auto n = node(EK::Filter, t);
    n->name = fname;
    n->fn = find_filter(fname);
    if (!n->fn) fail(t, "unsupported filter '" + fname + "'");
    if (is_op("(")) parse_call_args(*n);
    n->a = std::move(input);
    input = std::move(n);
  }
  return input;
}

ExprP Parser::parse_test(ExprP input) {
  next();  // 'is'
  bool negated = skip_name("not");
  Token t = cur();
  std::string tname = expect_name();
  while (is_op(".")) {
    next();
    tname += "." + expect_name();
  }
  auto n = node(EK::Test, t);
  n->name = tname;
  n->fn = find_test(tname);
  if (!n->fn) fail(t, "unsupported test '" + tname + "'");
  if (is_op("(")) {
    parse_call_args(*n);
  } else if ((cur().type == TT::Name || cur().type == TT::String || cur().type == TT::Int || cur().type == TT::Float ||
              is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail(cur(), "you cannot chain multiple tests with 'is'");
    n->args.push_back(parse_postfix(parse_primary()));
  }
  n->a = std::move(input);
  if (!negated) return n;
  auto no = node(EK::Not, t);
  no->a = std::move(n);
  return no;
}

}  // namespace ft::jinja::detail

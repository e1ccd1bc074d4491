// Parser of ft::jinja (internal): tokens -> syntax tree, following jinja2's parser.py.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/lexer.h"
#include "jinja/syntax.h"

namespace ft::jinja::detail {

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : toks_(std::move(tokens)), name_(name) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != TT::Eof) fail(cur(), "unexpected '" + describe(cur()) + "'");
    return body;
  }

 private:
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > 200) p_.fail(p_.cur(), "template nesting too deep (over 200 levels)");
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_name(const char* v) const { return cur().type == TT::Name && cur().value == v; }
  bool is_op(const char* v) const { return cur().type == TT::Op && cur().value == v; }
  bool skip_name(const char* v) {
    if (!is_name(v)) return false;
    next();
    return true;
  }
  bool skip_op(const char* v) {
    if (!is_op(v)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TT::Data:
        return "template data";
      case TT::VarBegin:
        return "{{";
      case TT::VarEnd:
        return "}}";
      case TT::BlockBegin:
        return "{%";
      case TT::BlockEnd:
        return "%}";
      case TT::Eof:
        return "end of template";
      case TT::Int:
        return std::to_string(t.ival);
      case TT::Float:
        return py_float_repr(t.fval);
      case TT::String:
        return py_str_repr(t.value);
      default:
        return t.value;
    }
  }

  [[noreturn]] void fail(const Token& t, const std::string& what) const {
    throw ConfigError(name_ + ":" + std::to_string(t.line) + ":" + std::to_string(t.col) + ": " + what, kHint);
  }
  void expect_op(const char* v) {
    if (!is_op(v)) fail(cur(), std::string("expected '") + v + "', got '" + describe(cur()) + "'");
    next();
  }
  void expect(TT type, const char* what) {
    if (cur().type != type) fail(cur(), std::string("expected ") + what + ", got '" + describe(cur()) + "'");
    next();
  }
  std::string expect_name() {
    if (cur().type != TT::Name) fail(cur(), "expected a name, got '" + describe(cur()) + "'");
    return next().value;
  }

  ExprP node(EK k, const Token& t) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = t.line;
    e->col = t.col;
    return e;
  }

  // ---- statements (parser_stmt.cpp)
  bool at_end_tokens(const std::vector<const char*>& ends) const;
  Body subparse(const std::vector<const char*>& ends);
  Body parse_statements(const std::vector<const char*>& ends, bool drop_needle, const Token& opener);
  StmtP make_stmt(SK k, const Token& t);
  StmtP parse_statement();
  StmtP parse_for();
  StmtP parse_if();
  StmtP parse_set();
  void parse_signature(MacroDef& m);
  StmtP parse_macro();
  StmtP parse_call_block();
  StmtP parse_filter_block();
  StmtP parse_with();
  ExprP parse_assign_target(bool with_tuple, const std::vector<const char*>& extra_end, bool with_namespace);

  // ---- expressions (parser_expr.cpp)
  bool is_tuple_end(const std::vector<const char*>& extra_end) const;
  ExprP parse_tuple(bool simplified, bool with_condexpr, const std::vector<const char*>& extra_end,
                    bool explicit_parens);
  ExprP parse_expression(bool with_condexpr);
  ExprP parse_condexpr();
  ExprP parse_or();
  ExprP parse_and();
  ExprP parse_not();
  ExprP parse_compare();
  ExprP binary(const std::string& op, ExprP l, ExprP r, const Token& t);
  ExprP parse_math1();
  ExprP parse_concat();
  ExprP parse_math2();
  ExprP parse_pow();
  ExprP parse_unary(bool with_filter);
  ExprP parse_primary();
  ExprP parse_name();
  ExprP parse_list_literal();
  ExprP parse_dict_literal();
  ExprP parse_postfix(ExprP n);
  ExprP parse_filter_expr(ExprP n);
  ExprP parse_subscript(ExprP obj);
  ExprP parse_subscribed();
  void parse_call_args(Expr& n);
  ExprP parse_call(ExprP callee);
  ExprP parse_filter(ExprP input, bool start_inline);
  ExprP parse_test(ExprP input);

  std::vector<Token> toks_;
  size_t pos_ = 0;
  const std::string& name_;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macro_stack_;
};

}  // namespace ft::jinja::detail

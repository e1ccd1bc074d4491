// Syntax tree of ft::jinja (internal): expressions, statements, macros and the parsed Program that the parser
// builds and the renderer walks; the names the parser checks against the builtins.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace ft::jinja::detail {

enum class EK : uint8_t {
  Const, Name, ListLit, Tuple, DictLit, GetAttr, GetItem, Slice, Call, Filter, Test,
  Neg, Pos, Not, And, Or, Binary, Concat, Compare, CondExpr
};

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
  EK kind;
  int line = 0;
  int col = 0;
  Val value;                 // Const
  std::string name;          // Name, GetAttr attribute, Filter/Test name, Binary operator
  ExprP a, b, c;             // operands (GetItem: a[b]; CondExpr: b if a else c; Filter/Test input: a)
  std::vector<ExprP> args;   // List/Tuple items, Dict keys+values interleaved, Call/Filter/Test args, Slice parts
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops;  // Compare: operator per args[i]
  const void* fn = nullptr;      // Filter/Test: resolved implementation
};

enum class SK : uint8_t {
  Output, Print, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue, Generation
};

struct Stmt;
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // aligned with the last params
  Body body;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

struct Stmt {
  SK kind;
  int line = 0;
  std::string text;         // Output
  ExprP expr;               // Print, If test, For iter, Set value, CallBlock call, FilterBlock filter chain
  ExprP target;             // For/Set target (Name, Tuple, or GetAttr ns.attr)
  ExprP cond;               // For filter
  Body body, else_body;     // If/For, SetBlock, Macro body, With, Generation
  std::vector<ExprP> targets, values;  // With
  std::shared_ptr<MacroDef> macro;     // Macro, CallBlock (the caller)
};

struct Program {
  std::string name;
  Body body;
};

// The whole template parsed (parser_stmt.cpp); throws ConfigError for syntax errors and unsupported constructs.
std::shared_ptr<Program> parse_template(const std::string& source, const std::string& name);

// Builtins checked by the parser, so that unsupported names fail when the template is parsed: the filter
// (filters.cpp) and the test (predicates.cpp) of that name, nullptr when there is none; method names
// (methods.cpp); globals jinja2 has and ft::jinja lacks (globals.cpp).
const void* find_filter(const std::string& name);
const void* find_test(const std::string& name);
bool is_supported_method(const std::string& name);
bool is_unsupported_global(const std::string& name);

}  // namespace ft::jinja::detail

// Internals of ft::jinja: runtime values with Python semantics, tokens, the syntax tree. Not part of the API.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/template.h"

#include "util/utf8.h"

namespace ft::jinja::detail {

// ---------------------------------------------------------------------------------------------------------------
// Runtime values: the Python objects a template sees (JSON data, tuples, generators, namespaces, callables, loop).

struct Val;
using List = std::vector<Val>;
using Dict = std::vector<std::pair<std::string, Val>>;  // insertion-ordered, string keys (JSON objects)
struct Callable;
struct Namespace;
struct LoopInfo;
class Renderer;

// Lists, dicts and namespaces nest at most this deep: deeper values (a template doing {% set x = [x] %} in a loop,
// or deeply nested JSON data) are refused (TypeErr) where they are made, so printing, comparing and freeing them
// never recurse past the stack.
constexpr uint16_t kMaxNesting = 256;
// 1 + the deepest element's depth; throws TypeErr beyond kMaxNesting.
uint16_t nesting_depth(const List& items);
uint16_t nesting_depth(const Dict& items);

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Seq, Map, Callable, Namespace, Loop };

enum ValFlags : uint8_t {
  kTuple = 1,   // a List printed as (a, b)
  kGen = 2,     // a List that is a Python iterator/generator: always truthy, no len()
  kUnsafe = 4,  // an Undefined standing for an attribute the sandbox forbids (calling it fails)
  kMarkup = 8,  // a String that is Markup (escape leaves it alone)
};

struct Val {
  Kind kind = Kind::Undefined;
  uint8_t flags = 0;
  bool b = false;
  uint16_t depth = 0;  // lists, dicts and namespaces nested inside this value, itself included (<= kMaxNesting)
  int64_t i = 0;
  double f = 0;
  std::string s;  // String; Undefined: why it is undefined (the UndefinedError message)
  std::shared_ptr<const List> list;
  std::shared_ptr<const Dict> dict;
  std::shared_ptr<Callable> fn;
  std::shared_ptr<Namespace> ns;
  std::shared_ptr<const LoopInfo> loop;

  static Val undef(std::string why) {
    Val v;
    v.s = std::move(why);
    return v;
  }
  static Val none() {
    Val v;
    v.kind = Kind::None;
    return v;
  }
  static Val boolean(bool x) {
    Val v;
    v.kind = Kind::Bool;
    v.b = x;
    return v;
  }
  static Val integer(int64_t x) {
    Val v;
    v.kind = Kind::Int;
    v.i = x;
    return v;
  }
  static Val real(double x) {
    Val v;
    v.kind = Kind::Float;
    v.f = x;
    return v;
  }
  static Val str(std::string x) {
    Val v;
    v.kind = Kind::String;
    v.s = std::move(x);
    return v;
  }
  static Val make_list(List x, uint8_t fl = 0) {
    Val v;
    v.kind = Kind::Seq;
    v.flags = fl;
    v.depth = nesting_depth(x);
    v.list = std::make_shared<const List>(std::move(x));
    return v;
  }
  static Val make_dict(Dict x) {
    Val v;
    v.kind = Kind::Map;
    v.depth = nesting_depth(x);
    v.dict = std::make_shared<const Dict>(std::move(x));
    return v;
  }
  bool is_undef() const { return kind == Kind::Undefined; }
  bool is_str() const { return kind == Kind::String; }
  bool is_num() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_intlike() const { return kind == Kind::Int || kind == Kind::Bool; }
  int64_t as_int() const { return kind == Kind::Bool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(as_int()); }
};

struct CallArgs {
  std::vector<Val> pos;
  std::vector<std::pair<std::string, Val>> kw;
};

struct Callable {
  std::string name;
  std::function<Val(Renderer&, CallArgs&, int line)> fn;
};

struct Namespace {
  Dict attrs;
};

struct LoopInfo {
  std::shared_ptr<const List> items;
  size_t index0 = 0;
};

// Python semantics (errors are thrown as std::runtime_error-derived TypeErr, turned into ft::Error with a line).
struct TypeErr : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A padded, indented or repeated string of `count` pieces of `unit` bytes each: refused (TypeErr) when it would
// exceed `max_bytes` (the render's output limit), before anything is allocated.
void check_result_size(uint64_t count, uint64_t unit, size_t max_bytes);

const char* type_name(const Val& v);  // Python's type name: 'str', 'int', 'dict', ...
bool truthy(const Val& v);
bool py_eq(const Val& a, const Val& b);
bool py_lt(const Val& a, const Val& b);  // throws TypeErr when not orderable
std::string to_str(const Val& v);        // str(v)
std::string to_repr(const Val& v);       // repr(v)
std::string py_float_repr(double d);
std::string py_str_repr(std::string_view s);
Val from_json(const Value& j);
Value to_json(const Val& v);  // throws TypeErr for values JSON cannot hold
// json.dumps(v, ensure_ascii, indent (nullptr: None), separators, sort_keys) as transformers' tojson calls it.
// Output past `max_bytes` throws TypeErr.
std::string json_dumps(const Val& v, bool ensure_ascii, const std::string* indent, const std::string& item_sep,
                       const std::string& key_sep, bool sort_keys, size_t max_bytes = SIZE_MAX);

// UTF-8 helpers: strings are indexed by code point as Python does.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
using ft::utf8::append_utf8;  // util/utf8.h
size_t utf8_length(std::string_view s);
bool is_ascii(std::string_view s);
bool py_isspace(char32_t c);
char32_t py_lower(char32_t c);
char32_t py_upper(char32_t c);
bool py_isupper(char32_t c);
bool py_islower(char32_t c);
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);
bool py_isalnum(char32_t c);

// ---------------------------------------------------------------------------------------------------------------
// Syntax tree.

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

std::shared_ptr<Program> parse_template(const std::string& source, const std::string& name);

// Registries (builtins.cpp, methods.cpp), checked by the parser so that unsupported names fail when the template
// is parsed.
const void* find_filter(const std::string& name);
const void* find_test(const std::string& name);
bool is_supported_method(const std::string& name);
bool is_unsupported_global(const std::string& name);

}  // namespace ft::jinja::detail

// Runtime values of ft::jinja (internal): the Python objects a template sees (JSON data, tuples, generators,
// namespaces, callables, loop), their Python semantics (value.cpp), call arguments, and JSON (json.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/template.h"

namespace ft::jinja::detail {

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

// Python's exceptions (TypeError, ValueError, UndefinedError, ...): thrown as TypeErr, turned into ft::Error with
// the template's line by the renderer.
struct TypeErr : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Python semantics (value.cpp).
const char* type_name(const Val& v);  // Python's type name: 'str', 'int', 'dict', ...
bool truthy(const Val& v);
bool py_eq(const Val& a, const Val& b);
bool py_lt(const Val& a, const Val& b);  // throws TypeErr when not orderable
std::string to_str(const Val& v);        // str(v)
std::string to_repr(const Val& v);       // repr(v)
std::string py_float_repr(double d);
std::string py_str_repr(std::string_view s);
std::vector<Val> iterate(const Val& v);  // Python iteration (throws TypeErr when not iterable)

// JSON (json.cpp).
Val from_json(const Value& j);
Value to_json(const Val& v);  // throws TypeErr for values JSON cannot hold
// json.dumps(v, ensure_ascii, indent (nullptr: None), separators, sort_keys) as transformers' tojson calls it.
// Output past `max_bytes` throws TypeErr.
std::string json_dumps(const Val& v, bool ensure_ascii, const std::string* indent, const std::string& item_sep,
                       const std::string& key_sep, bool sort_keys, size_t max_bytes = SIZE_MAX);

// Call arguments of builtins (value.cpp).

// The argument at position idx, else the keyword argument `name` (nullptr: none); nullptr when absent.
const Val* arg(const CallArgs& a, size_t idx, const char* name);
// truthy() of that argument, dflt when absent.
bool arg_bool(const CallArgs& a, size_t idx, const char* name, bool dflt);
// That argument as an integer, dflt when absent or None; TypeErr when it is not an int.
int64_t arg_int(const CallArgs& a, size_t idx, const char* name, int64_t dflt);
// v's string; TypeErr "<what> must be str" when v is not one.
const std::string& need_str(const Val& v, const char* what);

}  // namespace ft::jinja::detail

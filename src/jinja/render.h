// The tree-walking interpreter of ft::jinja (internal): the Renderer (render_stmt.cpp: statements, macros, output;
// render_expr.cpp: expressions; operators.cpp: binary operators) and the builtins it calls.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jinja/syntax.h"

namespace ft::jinja::detail {

struct Frame {
  explicit Frame(std::shared_ptr<Frame> p) : parent(std::move(p)) {}
  std::unordered_map<std::string, Val> vars;
  std::shared_ptr<Frame> parent;
};
using FrameP = std::shared_ptr<Frame>;

enum class Flow : uint8_t { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const Program& prog, const RenderOptions& opts) : prog_(prog), opts_(opts) {}
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;
  RenderResult run(const Value& context);

  // Used by builtins.
  [[noreturn]] void fail(int line, const std::string& what) const;
  Val call_value(const Val& callee, CallArgs& args, int line);
  Val getattr(const Val& obj, const std::string& name, int line);
  Val getitem(const Val& obj, const Val& key, int line);
  void step(int line);
  const RenderOptions& options() const { return opts_; }
  // A new namespace() object. Every one is emptied when the render ends, so a namespace that holds itself
  // (`{% set ns.x = ns %}`, harmless in Python's garbage-collected Jinja) is not leaked.
  std::shared_ptr<Namespace> new_namespace();

 private:
  // Statements, scoping, output and macros (render_stmt.cpp).
  Flow exec(const Body& body, const FrameP& f);
  Flow exec_stmt(const Stmt& s, const FrameP& f);
  Flow exec_for(const Stmt& s, const FrameP& f);
  Flow exec_set_block(const Stmt& s, const FrameP& f);
  Flow exec_call_block(const Stmt& s, const FrameP& f);
  Flow exec_filter_block(const Stmt& s, const FrameP& f);
  Flow exec_with(const Stmt& s, const FrameP& f);
  Flow exec_generation(const Stmt& s, const FrameP& f);
  Val filter_captured(const Expr& chain, const Val& captured, const FrameP& f);
  Val lookup(const std::string& name, const FrameP& f) const;
  void assign(const Expr& target, const Val& v, const FrameP& f, int line);
  void write(const std::string& s, int line);
  std::string capture(const Body& body, const FrameP& f);
  Val make_macro(const std::shared_ptr<MacroDef>& m, const FrameP& closure);
  Val call_macro(const MacroDef& m, const FrameP& closure, CallArgs& args, int line, const Val* caller);
  CallArgs eval_args(const Expr& e, const FrameP& f);

  // Expressions (render_expr.cpp; eval_binary: operators.cpp).
  Val eval(const Expr& e, const FrameP& f);
  Val eval_list(const Expr& e, const FrameP& f);
  Val eval_dict(const Expr& e, const FrameP& f);
  Val eval_slice(const Expr& e, const FrameP& f);
  Val eval_filter(const Expr& e, const FrameP& f);
  Val eval_test(const Expr& e, const FrameP& f);
  Val eval_unary(const Expr& e, const FrameP& f);
  Val eval_compare(const Expr& e, const FrameP& f);
  Val eval_cond(const Expr& e, const FrameP& f);
  Val eval_call(const Expr& e, const FrameP& f);
  Val eval_binary(const std::string& op, const Val& a, const Val& b);

  const Program& prog_;
  const RenderOptions& opts_;
  std::unordered_map<std::string, Val> globals_;
  std::string root_out_;
  std::string* out_ = &root_out_;
  std::vector<std::pair<size_t, size_t>> spans_;
  size_t total_written_ = 0;
  uint64_t steps_ = 0;
  int depth_ = 0;
  const Val* filter_input_ = nullptr;                   // the captured body of a {% filter %} block
  std::vector<std::shared_ptr<Namespace>> namespaces_;  // created by this render (see new_namespace)
};

// Builtins the renderer calls.

// Filters and tests: the registries (filters.cpp, predicates.cpp) hand out these entries, nullptr for no such name.
using FilterFn = Val (*)(Renderer&, const Val&, CallArgs&, int line);
using TestFn = bool (*)(Renderer&, const Val&, CallArgs&, int line);
struct FilterEntry {
  FilterFn fn;
};
struct TestEntry {
  TestFn fn;
};
const FilterEntry* filter_entry(const std::string& name);
const TestEntry* test_entry(const std::string& name);

// Methods of str, dict, list and loop (methods.cpp).
Val call_method(Renderer& r, const Val& obj, const std::string& name, CallArgs& args, int line);
bool has_method(const Val& obj, const std::string& name);
bool is_unsafe_method(const Val& obj, const std::string& name);

// Python's operators besides the arithmetic of Renderer::eval_binary (operators.cpp).
Val py_in(const Val& item, const Val& container);
// One comparison of a chain: ==, !=, <, <=, >, >=, in, notin (TypeErr for undefined or unorderable operands).
bool py_compare(const std::string& op, const Val& left, const Val& right);
// Python's str % args (also the format filter); a %s padded past max_bytes throws TypeErr.
Val percent_format(const std::string& fmt, const Val& args, size_t max_bytes);

// The globals: jinja2's range, dict and namespace, transformers' raise_exception and strftime_now (globals.cpp).
std::unordered_map<std::string, Val> make_globals(const RenderOptions& opts);

}  // namespace ft::jinja::detail

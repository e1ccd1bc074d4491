// ft::jinja: renders Hugging Face chat templates (Jinja) exactly as transformers' apply_chat_template does, i.e.
// jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker,
// loopcontrols]) with transformers' globals (raise_exception, strftime_now, namespace, dict) and its `tojson`.
// Supports the subset of Jinja that chat templates use; anything else is rejected when the template is parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ft::jinja {

using Value = nlohmann::ordered_json;

struct RenderResult {
  std::string text;
  // Byte ranges [begin, end) of `text` produced inside {% generation %}...{% endgeneration %} blocks (transformers'
  // AssistantTracker extension, used for assistant masks), in the order the blocks end (an inner block before the
  // block around it). Exactly what transformers reports, including its quirk for a block rendered inside a
  // capture (a macro, {% set %}...{% endset %}, {% filter %}, another generation block): the span starts at the
  // length of the text emitted at top level so far, not at the block's final position.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

// Limits that bound a hostile or buggy template; exceeding one throws ft::Error.
struct RenderOptions {
  size_t max_output_bytes = size_t{64} << 20;  // total rendered text, captures included
  int max_call_depth = 128;                    // nested macro / caller() calls
  uint64_t max_steps = 50'000'000;             // loop iterations + macro calls + printed nodes
  // strftime_now() uses this time (seconds since the epoch, local time zone) instead of the clock when set.
  std::optional<std::time_t> now;
};

// A raise_exception(msg) call in the template: what() is exactly the template's message.
struct TemplateRaised : ft::Error {
  using ft::Error::Error;
};

namespace detail {
struct Program;
}

class Template {
 public:
  // Parses once; throws ft::ConfigError "<name>:<line>:<col>: <what>" for syntax errors and for any construct,
  // filter, test or method outside the supported subset (named in the message), with a hint.
  explicit Template(std::string source, std::string name = "chat_template");
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;

  // Renders with the globals transformers provides plus `context` (an object: messages, bos_token, eos_token,
  // add_generation_prompt, tools, documents, any extra kwargs). Thread-safe: a Template may be rendered from
  // several threads at once.
  RenderResult render(const Value& context) const;
  RenderResult render(const Value& context, const RenderOptions& options) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const detail::Program> program_;
};

// The context transformers' render_jinja_template passes for one conversation: `messages` (each message's
// reasoning aliased like transformers' _alias_reasoning_fields: reasoning under "reasoning_content", "thinking" or
// "reasoning" fills "thinking" first and "reasoning_content" last), `tools` and `documents` (null when absent:
// they are always defined), `add_generation_prompt`, then every key of `extra` (bos_token, eos_token,
// enable_thinking, ...). Like apply_chat_template, message keys whose value is null are dropped.
Value make_chat_context(const Value& messages, const Value& tools = nullptr, const Value& documents = nullptr,
                        bool add_generation_prompt = false, const Value& extra = Value::object());

// Python's json.dumps(x, ensure_ascii=False) with the given indent (< 0: none) and default separators, as the
// template's tojson filter prints it. Exposed for callers that need to format tool schemas the same way.
std::string python_json_dumps(const Value& value, int indent = -1, bool sort_keys = false);

}  // namespace ft::jinja

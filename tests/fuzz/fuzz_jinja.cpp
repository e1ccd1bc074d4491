// Chat templates (tokenizer_config.json's chat_template, a --chat-template file): parsed and rendered with a
// conversation, as data preparation and `generate --chat` do. Payload: the template, optionally followed by
// "\n#messages#\n" and a JSON array of messages; the mode byte picks the generation prompt, tools and extra keys.
#include <ctime>
#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "jinja/template.h"

namespace ft::fuzz {

void target_setup() {}

std::vector<std::string> seeds() {
  const char* templates[] = {
      // ChatML with a system default and a generation prompt
      "{%- if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are helpful.<|im_end|>\n{%- endif %}"
      "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}"
      "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      // Llama 3 style headers, loop variables and a namespace
      "{{- bos_token }}{%- set ns = namespace(n=0) %}{%- for m in messages %}{%- set ns.n = ns.n + 1 %}"
      "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
      "{%- if loop.last and add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
      "{%- endfor %}{{ ns.n }}",
      // Mistral-style alternation check with raise_exception and generation blocks
      "{%- for m in messages %}{%- if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('roles must alternate') }}{%- endif %}"
      "{%- if m.role == 'user' %}[INST] {{ m.content }} [/INST]{%- else %}{% generation %}{{ m.content }}"
      "{{ eos_token }}{% endgeneration %}{%- endif %}{%- endfor %}",
      // macros, filters, tests, slicing, string methods, tojson of tools
      "{% macro show(x, sep=', ') %}{{ x | join(sep) }}{% endmacro %}{{ show(['a', 'b']) }}"
      "{% if tools is defined and tools is not none %}{{ tools | tojson(indent=2) }}{% endif %}"
      "{{ messages | length }} {{ (messages | map(attribute='role') | list)[::-1] }}"
      "{{ 'Hello World'.lower().split(' ') | first | upper | replace('H', 'J') }}"
      "{% for k, v in {'a': 1, 'b': [1, 2]}.items() %}{{ k }}={{ v }};{% endfor %}{{ '%5.2f' % 3.14159 }}",
      // set blocks, filters over captures, strftime_now and whitespace control
      "{% set sys %}{{ messages[0].content if messages else '' }}{% endset %}{{ sys | indent(2) | center(20) }}"
      "{{ strftime_now('%Y-%m-%d') }}{%- for m in messages if m.role != 'system' -%} {{ m.content[:5] }} "
      "{%- else %}none{% endfor %}{{ range(3) | sum }}{{ 7 // 2 }}{{ 2 ** 10 }}{{ 'x' ~ 1 }}",
      // a namespace that holds itself (a reference cycle that must not leak); in parentheses, as clang's
      // -Wstring-concatenation asks of a last element split over lines
      ("{% set ns = namespace(n=1) %}{% set ns.me = ns %}{% for m in messages %}{% set ns.n = ns.me.n + 1 %}"
       "{% endfor %}{{ ns.n }}"),
  };
  const std::string messages = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},)"
                               R"( {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}])";
  std::vector<std::string> out;
  uint8_t mode = 0;
  for (const char* t : templates) {
    out.push_back(with_mode(mode++, t));
    out.push_back(with_mode(mode++, std::string(t) + "\n#messages#\n" + messages));
  }
  return out;
}

}  // namespace ft::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ft::jinja::Value;
  const auto input = ft::fuzz::split_mode(data, size);
  const auto parts = ft::fuzz::cut(input.payload, "\n#messages#\n");
  const std::string source(parts.first);
  const std::string_view messages_text = parts.second;
  Value messages = Value::parse(messages_text, nullptr, /*allow_exceptions=*/false);
  if (!messages.is_array()) {
    messages = Value::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello"}}});
  }
  Value tools = nullptr;
  if (input.mode & 1) {
    tools = Value::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", Value::object()}}}}});
  }
  const Value extra = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"enable_thinking", (input.mode & 4) != 0}};
  ft::jinja::RenderOptions options;
  options.max_output_bytes = size_t{1} << 20;
  options.max_call_depth = 32;
  options.max_steps = 200'000;
  options.now = std::time_t{1700000000};
  ft::fuzz::accepted([&] {
    const ft::jinja::Template t{source};
    const Value context = ft::jinja::make_chat_context(messages, tools, nullptr, (input.mode & 2) != 0, extra);
    t.render(context, options);
  });
  return 0;
}

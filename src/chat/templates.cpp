#include "chat/templates.h"

#include <string_view>

#include "chat/templates_internal.h"
#include "config/settings.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ft::chat {
namespace {

using Kind = Segment::Kind;
using detail::mistral_jinja;
using detail::MistralVariant;
using detail::render_mistral;
using detail::special;

// Python's str.isspace for one code point (what Jinja's trim and str.strip() remove).
bool py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point starting at byte `i` of valid UTF-8 and its length in bytes.
std::pair<char32_t, size_t> code_point_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
  char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return {c, n};
}

// Python's str.strip() (Unicode whitespace at both ends), as the official templates' trim / .strip() do.
std::string strip(const std::string& s) {
  size_t b = 0;
  while (b < s.size()) {
    const auto [c, n] = code_point_at(s, b);
    if (!py_space(c)) break;
    b += n;
  }
  size_t e = s.size();
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!py_space(code_point_at(s, start).first)) break;
    e = start;
  }
  return s.substr(b, e - b);
}

void text(std::vector<Segment>& out, std::string t, bool loss) {
  out.push_back({Kind::kText, std::move(t), loss});
}

}  // namespace

namespace detail {

void special(std::vector<Segment>& out, std::string t, bool loss) {
  out.push_back({Kind::kSpecial, std::move(t), loss});
}

}  // namespace detail

namespace {

void check_roles(const std::vector<ChatMessage>& messages, bool system_anywhere = false) {
  if (messages.empty()) throw Error("the conversation has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& r = messages[i].role;
    if (r == "system" && i != 0 && !system_anywhere) {
      throw Error("a system message may only come first (message " + std::to_string(i) + ")");
    }
    if (r != "system" && r != "user" && r != "assistant") {
      throw Error("unknown role '" + r + "' (message " + std::to_string(i) + ")", "use system, user or assistant");
    }
  }
}

// Official meta-llama/Llama-2-7b-chat-hf: [INST] turns, <<SYS>> folded into the first user turn.
std::vector<Segment> render_llama2(const std::vector<ChatMessage>& messages, bool gen) {
  std::vector<Segment> out;
  size_t start = 0;
  std::string system;
  bool has_system = false;
  if (messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    start = 1;
  }
  for (size_t i = start; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const bool expect_user = (i - start) % 2 == 0;
    if ((m.role == "user") != expect_user) {
      throw Error("llama2 template: roles must alternate user/assistant/user/... (message " + std::to_string(i) + ")");
    }
    std::string content = m.content;
    if (i == start && has_system) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
    if (m.role == "user") {
      out.push_back({Kind::kBos, {}, false});
      text(out, "[INST] " + strip(content) + " [/INST]", false);
    } else {
      text(out, " " + strip(content) + " ", true);
      out.push_back({Kind::kEos, {}, true});
    }
  }
  (void)gen;  // the official template has no generation prompt: the model continues after [/INST]
  return out;
}

// Official meta-llama/Meta-Llama-3-8B-Instruct.
std::vector<Segment> render_llama3(const std::vector<ChatMessage>& messages, bool gen) {
  std::vector<Segment> out;
  out.push_back({Kind::kBos, {}, false});
  for (const auto& m : messages) {
    const bool a = m.role == "assistant";
    special(out, "<|start_header_id|>", false);
    text(out, m.role, false);
    special(out, "<|end_header_id|>", false);
    text(out, "\n\n", false);
    text(out, strip(m.content), a);
    special(out, "<|eot_id|>", a);
  }
  if (gen) {
    special(out, "<|start_header_id|>", false);
    text(out, "assistant", false);
    special(out, "<|end_header_id|>", false);
    text(out, "\n\n", false);
  }
  return out;
}

// ChatML as in Qwen/OpenAI (no default system prompt).
std::vector<Segment> render_chatml(const std::vector<ChatMessage>& messages, bool gen) {
  std::vector<Segment> out;
  for (const auto& m : messages) {
    const bool a = m.role == "assistant";
    special(out, "<|im_start|>", false);
    text(out, m.role + "\n", false);
    text(out, m.content, a);
    special(out, "<|im_end|>", a);
    text(out, "\n", false);
  }
  if (gen) {
    special(out, "<|im_start|>", false);
    text(out, "assistant\n", false);
  }
  return out;
}

// The project's minimal template: BOS, non-assistant turns each followed by a newline, assistant turns by EOS.
std::vector<Segment> render_plain(const std::vector<ChatMessage>& messages, bool /*gen*/) {
  std::vector<Segment> out;
  out.push_back({Kind::kBos, {}, false});
  for (const auto& m : messages) {
    if (m.role == "assistant") {
      text(out, m.content, true);
      out.push_back({Kind::kEos, {}, true});
    } else {
      text(out, m.content + "\n", false);
    }
  }
  return out;
}

// Gemma 3's official template: <start_of_turn>user|model ... <end_of_turn>\n, contents trimmed, a first system
// message folded into the first user turn (its text and "\n\n", untrimmed), roles alternating from user.
std::vector<Segment> render_gemma(const std::vector<ChatMessage>& messages, bool gen) {
  std::vector<Segment> out;
  auto joined = [&out](std::string t, bool loss) { out.push_back({Kind::kJoined, std::move(t), loss}); };
  out.push_back({Kind::kBos, {}, false});
  size_t start = 0;
  std::string first_user_prefix;
  if (messages[0].role == "system") {
    first_user_prefix = messages[0].content + "\n\n";
    start = 1;
  }
  for (size_t i = start; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if ((m.role == "user") != ((i - start) % 2 == 0)) {
      throw Error("gemma template: Conversation roles must alternate user/assistant/user/assistant/... (message " +
                  std::to_string(i) + " is " + m.role + ")");
    }
    const bool a = m.role == "assistant";
    special(out, "<start_of_turn>", false);
    joined(std::string(a ? "model" : "user") + "\n" + (i == start ? first_user_prefix : ""), false);
    joined(strip(m.content), a);
    special(out, "<end_of_turn>", a);
    joined("\n", false);
  }
  if (gen) {
    special(out, "<start_of_turn>", false);
    joined("model\n", false);
  }
  return out;
}

}  // namespace

const std::vector<std::string>& template_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;  // data.template's names (config/settings.h) but auto and the mistral family
    for (const auto& e : EnumTable<ChatTemplateName>::entries) {
      if (e.value != ChatTemplateName::kAuto && e.value != ChatTemplateName::kMistral) out.emplace_back(e.name);
    }
    return out;
  }();
  return names;
}

void check_template_name(const std::string& name) {
  if (name == "auto") return;     // the model's own Jinja template (data/chat_template.h) where it has one, else plain
  if (name == "mistral") return;  // a mistral-* variant, picked by resolve_template from the tokenizer
  for (const auto& n : template_names()) {
    if (n == name) return;
  }
  throw ConfigError("unknown chat template '" + name + "' (data.template)",
                    "use auto (the model's own), llama2, llama3, chatml, plain, gemma, or mistral (the tokenizer picks "
                    "mistral-v1, mistral-v3 or mistral-tekken; each may also be named)");
}

std::vector<Segment> render_chat(const std::string& name, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) {
  check_template_name(name);
  if (name == "mistral") {
    throw ConfigError("data.template mistral names a family: its variant depends on the tokenizer",
                      "resolve it with resolve_template (data/templates.h) before rendering");
  }
  const bool mistral = name.rfind("mistral-", 0) == 0;
  check_roles(messages, /*system_anywhere=*/mistral);
  if (name == "llama2") return render_llama2(messages, add_generation_prompt);
  if (name == "llama3") return render_llama3(messages, add_generation_prompt);
  if (name == "chatml") return render_chatml(messages, add_generation_prompt);
  if (name == "gemma") return render_gemma(messages, add_generation_prompt);
  if (name == "mistral-v1") return render_mistral(MistralVariant::kV1, messages, add_generation_prompt);
  if (name == "mistral-v3") return render_mistral(MistralVariant::kV3, messages, add_generation_prompt);
  if (name == "mistral-tekken") return render_mistral(MistralVariant::kTekken, messages, add_generation_prompt);
  return render_plain(messages, add_generation_prompt);  // plain, and auto for a model without a template
}

std::vector<std::string> template_markers(const std::string& name) {
  if (name == "llama3") return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  if (name == "chatml") return {"<|im_start|>", "<|im_end|>"};
  if (name == "gemma") return {"<start_of_turn>", "<end_of_turn>"};
  if (name == "mistral-v3" || name == "mistral-tekken") return {"[INST]", "[/INST]"};
  return {};
}

void check_template_markers(const std::string& template_name, const tok::Tokenizer& tokenizer) {
  const std::string name = resolve_template(template_name, tokenizer);
  std::string missing;  // "<a> <b>", for the message
  std::string yaml;     // "\"<a>\", \"<b>\"", for the hint
  for (const auto& marker : template_markers(name)) {
    if (tokenizer.piece_to_id(marker) >= 0) continue;
    missing += (missing.empty() ? "" : " ") + marker;
    yaml += (yaml.empty() ? "\"" : ", \"") + marker + "\"";
  }
  if (missing.empty()) return;
  throw ConfigError("data.template " + name + ": the tokenizer (" + tokenizer.model_file().string() +
                        ") has no single token for " + missing +
                        "; they would be trained as plain text and the model would not learn to end its turn",
                    "add them with tokenizer.add_tokens: [" + yaml +
                        "] (new tokens whose embedding rows are trained), use data.template: auto (the model's own "
                        "chat template) or a tokenizer that has these tokens");
}

namespace {

// Gemma 3's rendering (render_gemma), written for this project: trimmed contents, a first system message before the
// first user turn, alternation and role errors as render_gemma raises them.
constexpr const char* kGemmaJinja = R"({{- bos_token -}}
{%- if not messages -%}
{{- raise_exception('the conversation has no messages') -}}
{%- endif -%}
{%- set ns = namespace(prefix='', start=0) -%}
{%- if messages[0]['role'] == 'system' -%}
{%- set ns.prefix = messages[0]['content'] + '\n\n' -%}
{%- set ns.start = 1 -%}
{%- endif -%}
{%- for message in messages[ns.start:] -%}
{%- if message['role'] not in ['user', 'assistant'] -%}
{{- raise_exception('a ' + message['role'] + ' message may not come here: a system message only first, then user and assistant') -}}
{%- endif -%}
{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
{%- endif -%}
{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' + (ns.prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<start_of_turn>model\n' -}}
{%- endif -%})";

}  // namespace

std::string chat_template_jinja(const std::string& name) {
  check_template_name(name);
  if (name == "auto") return {};  // the model directory's own template is kept as it is
  if (name == "llama2") {
    return R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})";
  }
  if (name == "llama3") {
    return R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %})";
  }
  if (name == "chatml") {
    return R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})";
  }
  if (name == "gemma") return kGemmaJinja;
  if (name == "mistral-v1") return mistral_jinja(MistralVariant::kV1);
  if (name == "mistral-v3") return mistral_jinja(MistralVariant::kV3);
  if (name == "mistral-tekken") return mistral_jinja(MistralVariant::kTekken);
  if (name == "mistral") return {};  // unresolved: the model directory keeps its own
  return R"({{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% else %}{{ message['content'] + '
' }}{% endif %}{% endfor %})";
}

}  // namespace ft::chat

#include "data/templates.h"

#include <algorithm>
#include <fstream>
#include <string_view>

#include "data/tokenizer.h"
#include "util/error.h"

namespace ft::data {
namespace {

using Kind = Segment::Kind;

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

void text(std::vector<Segment>& out, std::string t, bool loss) { out.push_back({Kind::kText, std::move(t), loss}); }
void special(std::vector<Segment>& out, std::string t, bool loss) {
  out.push_back({Kind::kSpecial, std::move(t), loss});
}

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

// ---- mistral-common (v1, v2/v3 sentencepiece, v3 tekken): its validation, normalization and encoding.

enum class MistralVariant { kV1, kV3, kTekken };

// A message after mistral-common's normalization (InstructRequestNormalizer): one role, contents joined.
struct MistralTurn {
  bool user = false;
  std::string content;
};

[[noreturn]] void mistral_error(const std::string& what) {
  throw Error("mistral template: " + what + " (as mistral-common refuses it)");
}

// MistralRequestValidator: ValidationMode.finetuning for training data (the last message is the assistant's), its
// serving rules for a prompt (`gen`: the last message is the user's). Tool messages are not supported here.
void mistral_validate(const std::vector<ChatMessage>& m, bool gen) {
  if (m.size() == 1 && m[0].role != "user" && m[0].role != "system") {
    mistral_error("Conversation must start with a user message or system message");
  }
  if (!gen && m.back().role != "assistant") {
    mistral_error("Expected last role Assistant for finetuning but got " + m.back().role);
  }
  if (gen && m.size() > 1 && m.back().role != "user") {
    mistral_error("a prompt must end with a user message, got " + m.back().role);
  }
  for (size_t i = 1; i < m.size(); ++i) {
    if (m[i - 1].role == "assistant" && m[i].role == "system") {
      mistral_error("Unexpected role 'system' after role 'assistant' (message " + std::to_string(i) + ")");
    }
  }
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].role == "assistant" && m[i].content.empty()) {
      mistral_error("Assistant message must have either content or tool_calls, but not both (message " +
                    std::to_string(i) + " is empty)");
    }
  }
}

// Text of several messages joined as mistral-common joins them: non-empty contents, "\n\n" between.
void mistral_join(std::string& into, const std::string& content) {
  if (content.empty()) return;
  if (!into.empty()) into += "\n\n";
  into += content;
}

std::vector<Segment> render_mistral(MistralVariant variant, const std::vector<ChatMessage>& messages, bool gen) {
  mistral_validate(messages, gen);
  // Normalization: the system prompt from every system message; runs of user or assistant messages become one
  // message (a system message ends a run); an empty user message first when the conversation does not start so.
  std::string system;
  std::vector<MistralTurn> turns;
  std::string run_role;
  for (const auto& m : messages) {
    if (m.role == "system") {
      mistral_join(system, m.content);
    } else {
      if (m.role != run_role) turns.push_back({m.role == "user", {}});
      mistral_join(turns.back().content, m.content);
    }
    run_role = m.role;
  }
  if (turns.empty() || !turns.front().user) turns.insert(turns.begin(), MistralTurn{true, {}});
  size_t first_user = turns.size(), last_user = 0;
  for (size_t i = 0; i < turns.size(); ++i) {
    if (!turns[i].user) continue;
    first_user = std::min(first_user, i);
    last_user = i;
  }
  // Encoding: one BOS; each message encoded on its own. v1 writes [INST] as text around the user message and puts the
  // system prompt before the first one; v2/v3 (and tekken) use the control tokens, the system prompt before the last
  // user message, and strip trailing spaces of assistant messages. A space before a sentencepiece-encoded run shows
  // the word marker its encoding starts with (see Segment::kEncoded); tekken adds none.
  std::vector<Segment> out;
  auto encoded = [&out](std::string t, bool loss) { out.push_back({Kind::kEncoded, std::move(t), loss}); };
  const std::string marker = variant == MistralVariant::kTekken ? "" : " ";
  out.push_back({Kind::kBos, {}, false});
  bool after_text = false;  // v1: the run before was text (no BOS/EOS between)
  for (size_t i = 0; i < turns.size(); ++i) {
    std::string content = turns[i].content;
    if (turns[i].user) {
      const bool with_system = !system.empty() && i == (variant == MistralVariant::kV1 ? first_user : last_user);
      if (with_system) content = system + "\n\n" + content;
      if (variant == MistralVariant::kV1) {
        encoded((after_text ? " " : "") + std::string("[INST] ") + content + " [/INST]", false);
        after_text = true;
      } else {
        special(out, "[INST]", false);
        encoded(content.empty() ? "" : marker + content, false);
        special(out, "[/INST]", false);
      }
      continue;
    }
    if (variant != MistralVariant::kV1) content.erase(content.find_last_not_of(' ') + 1);  // rstrip(" ")
    encoded(content.empty() ? "" : marker + content, true);
    out.push_back({Kind::kEos, {}, true});
    after_text = false;
  }
  return out;  // a prompt ends with [/INST]: the model answers from there (no generation header)
}

std::string mistral_variant_name(MistralVariant v) {
  return v == MistralVariant::kV1 ? "mistral-v1" : v == MistralVariant::kV3 ? "mistral-v3" : "mistral-tekken";
}

// The "version" of a tekken file's config ("v3", "v7", ...), read from the file's head where mistral-common's
// files keep their config; 0 when it is not there.
int tekken_version(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string head(16384, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  const auto key = head.find("\"version\"");
  if (key == std::string::npos) return 0;
  const auto v = head.find_first_not_of(" \t\r\n:\"", key + 9);
  if (v == std::string::npos || head[v] != 'v') return 0;
  int n = 0;
  for (size_t i = v + 1; i < head.size() && head[i] >= '0' && head[i] <= '9'; ++i) n = n * 10 + (head[i] - '0');
  return n;
}

}  // namespace

const std::vector<std::string>& template_names() {
  static const std::vector<std::string> names = {"llama2",     "llama3",     "chatml",         "plain",
                                                 "mistral-v1", "mistral-v3", "mistral-tekken", "gemma"};
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

std::string resolve_template(const std::string& name, const Tokenizer& tokenizer) {
  check_template_name(name);
  if (name != "mistral") return name;
  auto control = [&tokenizer](const char* piece) {
    const int64_t id = tokenizer.piece_to_id(piece);
    return id >= 0 && tokenizer.is_special(id);
  };
  const bool word_marker = tokenizer.adds_dummy_prefix();
  const bool v7 = tokenizer.kind() == "tekken" ? tekken_version(tokenizer.model_file()) >= 7
                                                : word_marker && control("[SYSTEM_PROMPT]");
  if (v7) {
    throw ConfigError("data.template mistral: the tokenizer (" + tokenizer.model_file().string() +
                          ") is of mistral-common's v7 format or later ([SYSTEM_PROMPT] blocks), which is not built in",
                      "use data.template: auto (the model's own chat template)");
  }
  if (!control("[INST]") || !control("[/INST]")) return mistral_variant_name(MistralVariant::kV1);
  if (tokenizer.kind() == "tekken" || !word_marker) return mistral_variant_name(MistralVariant::kTekken);
  return mistral_variant_name(MistralVariant::kV3);
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

void check_template_markers(const std::string& template_name, const Tokenizer& tokenizer) {
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

// mistral-common's validation and normalization (render_mistral) in Jinja: ns.turns holds [role, content] pairs,
// ns.system the system prompt, ns.first_user / ns.last_user where it goes.
constexpr const char* kMistralJinjaPrologue = R"({%- if not messages -%}
{{- raise_exception('Conversation must have at least one message') -}}
{%- endif -%}
{%- if messages | length == 1 and messages[0]['role'] not in ['user', 'system'] -%}
{{- raise_exception('Conversation must start with a user message or system message') -}}
{%- endif -%}
{%- if not add_generation_prompt and messages[-1]['role'] != 'assistant' -%}
{{- raise_exception('Expected last role Assistant for finetuning but got ' + messages[-1]['role']) -}}
{%- endif -%}
{%- if add_generation_prompt and messages | length > 1 and messages[-1]['role'] != 'user' -%}
{{- raise_exception('a prompt must end with a user message, got ' + messages[-1]['role']) -}}
{%- endif -%}
{%- set ns = namespace(system='', role='', text='', turns=[], first_user=-1, last_user=-1, after_text=false) -%}
{%- for message in messages -%}
{%- if message['role'] not in ['system', 'user', 'assistant'] -%}
{{- raise_exception("unknown role '" + message['role'] + "'") -}}
{%- endif -%}
{%- if ns.role == 'assistant' and message['role'] == 'system' -%}
{{- raise_exception("Unexpected role 'system' after role 'assistant'") -}}
{%- endif -%}
{%- if message['role'] == 'assistant' and not message['content'] -%}
{{- raise_exception('Assistant message must have either content or tool_calls') -}}
{%- endif -%}
{%- if message['role'] != ns.role -%}
{%- if ns.role in ['user', 'assistant'] -%}
{%- set ns.turns = ns.turns + [[ns.role, ns.text]] -%}
{%- endif -%}
{%- set ns.text = '' -%}
{%- endif -%}
{%- if message['content'] and message['role'] == 'system' -%}
{%- set ns.system = ns.system + ('\n\n' if ns.system else '') + message['content'] -%}
{%- elif message['content'] -%}
{%- set ns.text = ns.text + ('\n\n' if ns.text else '') + message['content'] -%}
{%- endif -%}
{%- set ns.role = message['role'] -%}
{%- endfor -%}
{%- if ns.role in ['user', 'assistant'] -%}
{%- set ns.turns = ns.turns + [[ns.role, ns.text]] -%}
{%- endif -%}
{%- if not ns.turns or ns.turns[0][0] != 'user' -%}
{%- set ns.turns = [['user', '']] + ns.turns -%}
{%- endif -%}
{%- for turn in ns.turns -%}
{%- if turn[0] == 'user' -%}
{%- if ns.first_user < 0 -%}
{%- set ns.first_user = loop.index0 -%}
{%- endif -%}
{%- set ns.last_user = loop.index0 -%}
{%- endif -%}
{%- endfor -%}
{{- bos_token -}}
)";

// v1: [INST] as text around the user message, the system prompt before the first one, a space for the word marker
// of each sentencepiece run that follows text.
constexpr const char* kMistralJinjaV1 = R"({%- for turn in ns.turns -%}
{%- if turn[0] == 'user' -%}
{%- set content = (ns.system + '\n\n' + turn[1]) if (loop.index0 == ns.first_user and ns.system) else turn[1] -%}
{{- (' ' if ns.after_text else '') + '[INST] ' + content + ' [/INST]' -}}
{%- set ns.after_text = true -%}
{%- else -%}
{{- ' ' + turn[1] + eos_token -}}
{%- set ns.after_text = false -%}
{%- endif -%}
{%- endfor -%})";

// v2/v3 and tekken: control tokens, the system prompt before the last user message, assistant messages without
// trailing spaces; MARKER (a space for sentencepiece's word marker, nothing for tekken) before non-empty contents.
constexpr const char* kMistralJinjaV3 = R"({%- for turn in ns.turns -%}
{%- if turn[0] == 'user' -%}
{%- set content = (ns.system + '\n\n' + turn[1]) if (loop.index0 == ns.last_user and ns.system) else turn[1] -%}
{{- '[INST]' + ('MARKER' + content if content else '') + '[/INST]' -}}
{%- else -%}
{%- set content = turn[1].rstrip(' ') -%}
{{- ('MARKER' + content if content else '') + eos_token -}}
{%- endif -%}
{%- endfor -%})";

std::string mistral_jinja(MistralVariant variant) {
  if (variant == MistralVariant::kV1) return std::string(kMistralJinjaPrologue) + kMistralJinjaV1;
  std::string body = kMistralJinjaV3;
  const std::string marker = variant == MistralVariant::kTekken ? "" : " ";
  for (size_t at = body.find("MARKER"); at != std::string::npos; at = body.find("MARKER", at + marker.size())) {
    body.replace(at, 6, marker);
  }
  return kMistralJinjaPrologue + body;
}

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

std::string segments_to_string(const std::vector<Segment>& segments, const std::string& bos, const std::string& eos) {
  std::string s;
  for (const auto& seg : segments) {
    if (seg.kind == Kind::kBos) s += bos;
    else if (seg.kind == Kind::kEos) s += eos;
    else s += seg.text;
  }
  return s;
}

TokenizedSample tokenize_segments(const Tokenizer& tokenizer, const std::vector<Segment>& segments) {
  TokenizedSample out;
  auto push = [&out](int64_t id, bool loss) {
    out.tokens.push_back(static_cast<int32_t>(id));
    out.loss.push_back(loss ? 1 : 0);
  };
  std::string pending;
  bool pending_loss = false;
  bool first_text = true;
  auto flush = [&] {
    if (pending.empty()) return;
    // Each run is encoded on its own, so sentencepiece adds its word marker again; a run that continues the
    // text and starts with a space lets that marker stand for the space, as encoding the whole string would.
    std::string_view text = pending;
    if (!first_text && tokenizer.adds_dummy_prefix() && text.size() > 1 && text[0] == ' ') text.remove_prefix(1);
    for (int64_t id : tokenizer.encode(text)) push(id, pending_loss);
    first_text = false;
    pending.clear();
  };
  // kJoined pieces: the text in one piece, and where each piece with loss ends (byte ranges of `joined`).
  std::string joined;
  std::vector<std::pair<size_t, size_t>> joined_loss;
  auto flush_joined = [&] {
    if (joined.empty()) return;
    const auto enc = tokenizer.encode_with_offsets(joined, /*split_special=*/true);
    for (size_t i = 0; i < enc.ids.size(); ++i) {
      const size_t at = enc.offsets[i].first;
      const bool loss = std::any_of(joined_loss.begin(), joined_loss.end(),
                                    [at](const auto& r) { return at >= r.first && at < r.second; });
      push(enc.ids[i], loss);
    }
    first_text = false;
    joined.clear();
    joined_loss.clear();
  };
  auto add_joined = [&](const std::string& text, bool loss) {
    if (loss && !text.empty()) joined_loss.emplace_back(joined.size(), joined.size() + text.size());
    joined += text;
  };
  const bool joined_template =
      std::any_of(segments.begin(), segments.end(), [](const Segment& s) { return s.kind == Kind::kJoined; });
  for (const auto& seg : segments) {
    if (seg.kind == Kind::kText) {
      if (seg.text.empty()) continue;
      flush_joined();
      if (!pending.empty() && pending_loss != seg.loss) flush();
      pending += seg.text;
      pending_loss = seg.loss;
      continue;
    }
    if (seg.kind == Kind::kJoined) {
      flush();
      add_joined(seg.text, seg.loss);
      continue;
    }
    if (seg.kind == Kind::kEncoded) {
      flush();
      flush_joined();
      // mistral-common encodes each message by itself; a leading space shows the word marker the encoding adds.
      std::string_view text = seg.text;
      if (tokenizer.adds_dummy_prefix() && !text.empty() && text[0] == ' ') text.remove_prefix(1);
      if (!text.empty()) {
        for (int64_t id : tokenizer.encode(text, /*split_special=*/true)) push(id, seg.loss);
      }
      first_text = false;
      continue;
    }
    if (seg.kind == Kind::kSpecial) {
      const int64_t id = tokenizer.piece_to_id(seg.text);
      if (id < 0) {  // the tokenizer lacks the marker: it is ordinary text
        if (joined_template) {
          add_joined(seg.text, seg.loss);
          continue;
        }
        if (!pending.empty() && pending_loss != seg.loss) flush();
        pending += seg.text;
        pending_loss = seg.loss;
        continue;
      }
      flush();
      flush_joined();
      push(id, seg.loss);
      continue;
    }
    flush();
    flush_joined();
    const int64_t id = seg.kind == Kind::kBos ? tokenizer.bos_id() : tokenizer.eos_id();
    if (id >= 0) push(id, seg.loss);
  }
  flush();
  flush_joined();
  return out;
}

}  // namespace ft::data

// The mistral-common family (mistral-v1, mistral-v3, mistral-tekken): its validation, normalization and encoding,
// the variant a tokenizer needs (resolve_template), and its Jinja templates.
#include <algorithm>
#include <fstream>

#include "chat/templates_internal.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace ft::chat {
namespace {

using Kind = Segment::Kind;
using detail::MistralVariant;

// ---- mistral-common (v1, v2/v3 sentencepiece, v3 tekken): its validation, normalization and encoding.

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

}  // namespace

namespace detail {

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

}  // namespace detail

namespace {

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

std::string resolve_template(const std::string& name, const tok::Tokenizer& tokenizer) {
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

namespace {

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

}  // namespace

namespace detail {

std::string mistral_jinja(MistralVariant variant) {
  if (variant == MistralVariant::kV1) return std::string(kMistralJinjaPrologue) + kMistralJinjaV1;
  std::string body = kMistralJinjaV3;
  const std::string marker = variant == MistralVariant::kTekken ? "" : " ";
  for (size_t at = body.find("MARKER"); at != std::string::npos; at = body.find("MARKER", at + marker.size())) {
    body.replace(at, 6, marker);
  }
  return kMistralJinjaPrologue + body;
}

}  // namespace detail
}  // namespace ft::chat

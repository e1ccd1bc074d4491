#include "data/templates.h"

#include "data/tokenizer.h"
#include "util/error.h"

namespace ft::data {
namespace {

using Kind = Segment::Kind;

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

void text(std::vector<Segment>& out, std::string t, bool loss) { out.push_back({Kind::kText, std::move(t), loss}); }
void special(std::vector<Segment>& out, std::string t, bool loss) {
  out.push_back({Kind::kSpecial, std::move(t), loss});
}

void check_roles(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) throw Error("the conversation has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& r = messages[i].role;
    if (r == "system" && i != 0) throw Error("a system message may only come first (message " + std::to_string(i) + ")");
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

}  // namespace

const std::vector<std::string>& template_names() {
  static const std::vector<std::string> names = {"llama2", "llama3", "chatml", "plain"};
  return names;
}

void check_template_name(const std::string& name) {
  if (name == "auto") return;  // the model's own Jinja template (data/chat_template.h) where it has one, else plain
  for (const auto& n : template_names()) {
    if (n == name) return;
  }
  throw ConfigError("unknown chat template '" + name + "' (data.template)",
                    "use auto (the model's own), llama2, llama3, chatml or plain");
}

std::vector<Segment> render_chat(const std::string& name, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) {
  check_template_name(name);
  check_roles(messages);
  if (name == "llama2") return render_llama2(messages, add_generation_prompt);
  if (name == "llama3") return render_llama3(messages, add_generation_prompt);
  if (name == "chatml") return render_chatml(messages, add_generation_prompt);
  return render_plain(messages, add_generation_prompt);  // plain, and auto for a model without a template
}

std::vector<std::string> template_markers(const std::string& name) {
  if (name == "llama3") return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  if (name == "chatml") return {"<|im_start|>", "<|im_end|>"};
  return {};
}

void check_template_markers(const std::string& name, const Tokenizer& tokenizer) {
  std::string missing;
  for (const auto& marker : template_markers(name)) {
    if (tokenizer.piece_to_id(marker) < 0) missing += (missing.empty() ? "" : " ") + marker;
  }
  if (missing.empty()) return;
  throw ConfigError("data.template " + name + ": the tokenizer (" + tokenizer.model_file().string() +
                        ") has no single token for " + missing +
                        "; they would be trained as plain text and the model would not learn to end its turn",
                    "use data.template: auto (the model's own chat template) or a tokenizer that has these tokens");
}

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
  for (const auto& seg : segments) {
    if (seg.kind == Kind::kText) {
      if (seg.text.empty()) continue;
      if (!pending.empty() && pending_loss != seg.loss) flush();
      pending += seg.text;
      pending_loss = seg.loss;
      continue;
    }
    if (seg.kind == Kind::kSpecial) {
      const int64_t id = tokenizer.piece_to_id(seg.text);
      if (id < 0) {  // the tokenizer lacks the marker: it is ordinary text
        if (!pending.empty() && pending_loss != seg.loss) flush();
        pending += seg.text;
        pending_loss = seg.loss;
        continue;
      }
      flush();
      push(id, seg.loss);
      continue;
    }
    flush();
    const int64_t id = seg.kind == Kind::kBos ? tokenizer.bos_id() : tokenizer.eos_id();
    if (id >= 0) push(id, seg.loss);
  }
  flush();
  return out;
}

}  // namespace ft::data

#include "chat/chat_template.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/fs.h"
#include "util/hash.h"

namespace ft::chat {
namespace {

// obj[key] when it is a string, else "" (json::value() trips GCC 12's -Wnull-dereference).
template <class Json>
std::string string_field(const Json& obj, const char* key) {
  if (!obj.is_object()) return {};
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->template get<std::string>() : std::string();
}

bool inside(size_t pos, const std::vector<std::pair<size_t, size_t>>& spans) {
  return std::any_of(spans.begin(), spans.end(), [&](const auto& s) { return pos >= s.first && pos < s.second; });
}

nlohmann::json parse_json_file(const std::filesystem::path& file) {
  try {
    return nlohmann::json::parse(read_text_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("cannot parse " + file.string() + ": " + e.what(), "fix or remove the file");
  }
}

// A multimodal checkpoint's processor template (chat_template.json, {"chat_template": "..."}: Gemma 3 4B+), which
// transformers' processor applies; it renders text-only conversations as the tokenizer's would.
std::optional<ChatTemplateSource> processor_chat_template(const std::filesystem::path& dir) {
  const auto file = dir / "chat_template.json";
  if (!std::filesystem::exists(file)) return std::nullopt;
  const nlohmann::json j = parse_json_file(file);
  if (!j.is_object() || !j.contains("chat_template") || !j["chat_template"].is_string()) {
    throw ConfigError(file.string() + ": expected an object with a \"chat_template\" string",
                      "fix the file, or set data.template to a built-in template (llama2, llama3, chatml, plain)");
  }
  return ChatTemplateSource{j["chat_template"].get<std::string>(), file};
}

}  // namespace

std::optional<ChatTemplateSource> find_chat_template(const std::filesystem::path& dir) {
  if (dir.empty()) return std::nullopt;
  if (std::filesystem::exists(dir / "chat_template.jinja")) {
    return ChatTemplateSource{read_text_file(dir / "chat_template.jinja"), dir / "chat_template.jinja"};
  }
  const auto config_file = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(config_file)) return processor_chat_template(dir);
  const nlohmann::json config = parse_json_file(config_file);
  if (!config.is_object() || !config.contains("chat_template")) return processor_chat_template(dir);
  const auto& t = config["chat_template"];
  if (t.is_string()) return ChatTemplateSource{t.get<std::string>(), config_file};
  if (t.is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
    for (const auto& entry : t) {
      if (entry.is_object() && string_field(entry, "name") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return ChatTemplateSource{entry["template"].get<std::string>(), config_file};
      }
    }
  }
  throw ConfigError(config_file.string() + ": chat_template must be a string or a list with a \"default\" entry",
                    "fix the file, or set data.template to a built-in template (llama2, llama3, chatml, plain)");
}

std::optional<ChatTemplateSource> find_model_chat_template(const std::filesystem::path& model_dir,
                                                           const tok::Tokenizer& tokenizer) {
  auto source = find_chat_template(model_dir);
  if (!source) source = find_chat_template(tokenizer.model_file().parent_path());
  if (source) FT_LOG_INFO("chat template: the model's own, from {}", source->origin.string());
  return source;
}

JinjaChat::JinjaChat(const ChatTemplateSource& source, const tok::Tokenizer& tokenizer)
    : source_(source), template_(source.text, source.origin.string()), tokenizer_(tokenizer) {
  specials_ = jinja::Value::object();
  auto spelling = [&](int64_t id) -> jinja::Value {
    if (id < 0) return nullptr;
    return tokenizer.id_to_piece(id);
  };
  specials_["bos_token"] = spelling(tokenizer.bos_id());
  specials_["eos_token"] = spelling(tokenizer.eos_id());
  specials_["pad_token"] = spelling(tokenizer.pad_id());
}

uint64_t JinjaChat::fingerprint() const {
  return hash_bytes(source_.text.data(), source_.text.size());
}

jinja::RenderResult JinjaChat::render_raw(const jinja::Value& messages, bool add_generation_prompt) const {
  return template_.render(jinja::make_chat_context(messages, nullptr, nullptr, add_generation_prompt, specials_));
}

RenderedChat JinjaChat::render(const jinja::Value& messages, bool add_generation_prompt, bool last_only) const {
  const auto full = render_raw(messages, add_generation_prompt);
  RenderedChat out;
  out.text = full.text;

  // Message contents, found in order: user text that must not turn into special tokens.
  size_t cursor = 0;
  std::vector<std::pair<size_t, size_t>> content_of(messages.size(), {std::string::npos, 0});
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.contains("content") || !m["content"].is_string()) continue;
    const auto& c = m["content"].get_ref<const std::string&>();
    if (c.empty()) continue;
    const size_t at = out.text.find(c, cursor);
    if (at == std::string::npos) continue;  // the template changed it (trimmed, split): left to the template
    content_of[i] = {at, at + c.size()};
    out.content.push_back(content_of[i]);
    cursor = at + c.size();
  }

  std::vector<size_t> assistants;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (string_field(messages[i], "role") == "assistant") assistants.push_back(i);
  }
  if (last_only && assistants.size() > 1) assistants.erase(assistants.begin(), assistants.end() - 1);

  if (!full.generation_spans.empty()) {  // the template marks assistant text itself
    auto spans = full.generation_spans;
    std::sort(spans.begin(), spans.end());
    if (last_only) spans.erase(spans.begin(), spans.end() - 1);
    out.trained = spans;
    return out;
  }
  const std::string eos = specials_["eos_token"].is_string() ? specials_["eos_token"].get<std::string>() : "";
  for (size_t k : assistants) {
    // The turn is what rendering through it adds to the conversation before it plus the generation prompt, as
    // long as both renderings are prefixes of the full text.
    std::optional<std::pair<size_t, size_t>> span;
    try {
      const jinja::Value before(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(k));
      const jinja::Value through(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(k + 1));
      const std::string p = render_raw(before, true).text;  // with k == 0: a default system block, the prompt
      const std::string f = render_raw(through, false).text;
      if (f.size() > p.size() && f.compare(0, p.size(), p) == 0 && out.text.compare(0, f.size(), f) == 0) {
        // The separator a template writes after the end-of-turn marker ("<|im_end|>\n") belongs to the layout
        // between turns, not to what the model says.
        size_t end = f.size();
        while (end > p.size() + 1 && std::isspace(static_cast<unsigned char>(f[end - 1]))) --end;
        span = std::make_pair(p.size(), end);
      }
    } catch (const Error&) {
      // A template that refuses a partial conversation (e.g. one ending in a user turn): use the content.
    }
    if (!span && content_of[k].first != std::string::npos) {
      size_t end = content_of[k].second;
      if (!eos.empty() && out.text.compare(end, eos.size(), eos) == 0) end += eos.size();
      span = std::make_pair(content_of[k].first, end);
    }
    if (span) out.trained.push_back(*span);
  }
  return out;
}

TokenizedSample JinjaChat::tokenize(const RenderedChat& chat, bool split_special_in_content) const {
  // Contents that spell a special token are encoded as text on their own; all else in one piece, so the ids are
  // exactly apply_chat_template's whenever no content does.
  std::vector<std::pair<size_t, size_t>> protect;
  if (split_special_in_content) {
    for (const auto& [b, e] : chat.content) {
      const auto ids = tokenizer_.encode_with_offsets(std::string_view(chat.text).substr(b, e - b)).ids;
      if (std::any_of(ids.begin(), ids.end(), [&](int64_t id) { return tokenizer_.is_special(id); })) {
        protect.emplace_back(b, e);
      }
    }
  }
  TokenizedSample out;
  auto add = [&](size_t begin, size_t end, bool split_special) {
    if (begin >= end) return;
    const auto enc =
        tokenizer_.encode_with_offsets(std::string_view(chat.text).substr(begin, end - begin), split_special);
    for (size_t i = 0; i < enc.ids.size(); ++i) {
      out.tokens.push_back(static_cast<int32_t>(enc.ids[i]));
      out.loss.push_back(inside(begin + enc.offsets[i].first, chat.trained) ? 1 : 0);
    }
  };
  size_t at = 0;
  for (const auto& [b, e] : protect) {
    add(at, b, false);
    add(b, e, true);
    at = e;
  }
  add(at, chat.text.size(), false);
  return out;
}

std::vector<int64_t> chat_prompt_ids(const std::string& template_name, const std::filesystem::path& model_dir,
                                     const tok::Tokenizer& tokenizer, const std::string& system,
                                     const std::vector<ChatMessage>& turns) {
  std::vector<ChatMessage> messages;
  const bool has_system =
      std::any_of(turns.begin(), turns.end(), [](const ChatMessage& m) { return m.role == "system"; });
  if (!system.empty() && !has_system) messages.push_back({"system", system});
  messages.insert(messages.end(), turns.begin(), turns.end());
  std::optional<ChatTemplateSource> source;
  if (template_name == "auto") {
    if (!model_dir.empty()) source = find_chat_template(model_dir);
    if (!source) source = find_chat_template(tokenizer.model_file().parent_path());
  }
  TokenizedSample sample;
  if (source) {
    const JinjaChat chat(*source, tokenizer);
    jinja::Value conversation = jinja::Value::array();
    for (const auto& m : messages) conversation.push_back({{"role", m.role}, {"content", m.content}});
    sample = chat.tokenize(chat.render(conversation, /*add_generation_prompt=*/true, /*last_only=*/false));
  } else {
    const std::string name = resolve_template(template_name == "auto" ? "plain" : template_name, tokenizer);
    sample = tokenize_segments(tokenizer, render_chat(name, messages, /*add_generation_prompt=*/true));
  }
  return {sample.tokens.begin(), sample.tokens.end()};
}

}  // namespace ft::chat

// A model's own chat template (Jinja from chat_template.jinja or tokenizer_config.json), rendered and tokenized as
// transformers' apply_chat_template(tokenize=True) does, with the loss on assistant turns.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/templates.h"
#include "jinja/template.h"

namespace ft::tok {
class Tokenizer;
}
namespace ft::chat {

// The template transformers would use for `dir`: chat_template.jinja, else tokenizer_config.json's "chat_template"
// (a string, or the entry named "default" of a list of {name, template}), else a multimodal checkpoint's processor
// template (chat_template.json). nullopt when the model has none.
struct ChatTemplateSource {
  std::string text;              // Jinja source
  std::filesystem::path origin;  // the file it came from
};
std::optional<ChatTemplateSource> find_chat_template(const std::filesystem::path& dir);
// The model's own template for a run (data.template: auto): find_chat_template of `model_dir`, else of the folder of
// the tokenizer's file (a tokenizer.path apart from the model), logged when found; nullopt when neither has one.
std::optional<ChatTemplateSource> find_model_chat_template(const std::filesystem::path& model_dir,
                                                           const tok::Tokenizer& tokenizer);

// A conversation rendered to text, with byte spans [begin, end) of that text.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> trained;  // tokens starting here are targets (assistant turns)
  std::vector<std::pair<size_t, size_t>> content;  // message contents as the data gave them (user text)
};

class JinjaChat {
 public:
  // Parses the template (ConfigError naming origin:line:col for anything outside the supported Jinja subset).
  // `tokenizer` must outlive this object; its BOS/EOS/PAD/UNK spellings are the template's bos_token & co.
  JinjaChat(const ChatTemplateSource& source, const tok::Tokenizer& tokenizer);

  // Renders `messages` (objects with at least role and content; other keys such as tool_calls pass through).
  // Trained spans: the {% generation %} blocks where the template has them; otherwise each assistant turn as the
  // difference between the conversation rendered up to it with the generation prompt and rendered through it
  // (content plus the end-of-turn marker; whitespace after the marker is layout and left out), or, where the template
  // renders earlier turns differently, the message's content found in the text plus an EOS that directly follows.
  // `last_only`: only the last assistant turn. Template errors (raise_exception) throw ft::Error with the template's
  // message.
  RenderedChat render(const jinja::Value& messages, bool add_generation_prompt, bool last_only) const;

  // Ids of the rendered text as apply_chat_template(tokenize=True) gives them, and per token whether it is a
  // target. When `split_special_in_content` and a message content spells a special token, that content is
  // encoded as plain text (the rest of the template still yields its markers as special tokens).
  TokenizedSample tokenize(const RenderedChat& chat, bool split_special_in_content = true) const;

  const ChatTemplateSource& source() const { return source_; }
  uint64_t fingerprint() const;  // of the template text, for cache keys

 private:
  jinja::RenderResult render_raw(const jinja::Value& messages, bool add_generation_prompt) const;

  ChatTemplateSource source_;
  jinja::Template template_;
  const tok::Tokenizer& tokenizer_;
  jinja::Value specials_;  // bos_token, eos_token, pad_token, unk_token spellings
};

// The ids of a prompt for a chat model: the turns (ending with a user turn; after a system turn when `system` is not
// empty and the turns have none) with the generation prompt, in the template data.template names: auto = the model's
// own (from `model_dir`, else beside the tokenizer file) as apply_chat_template(add_generation_prompt=True) tokenizes
// it, else a built-in one (auto without a model template: plain).
std::vector<int64_t> chat_prompt_ids(const std::string& template_name, const std::filesystem::path& model_dir,
                                     const tok::Tokenizer& tokenizer, const std::string& system,
                                     const std::vector<ChatMessage>& turns);

}  // namespace ft::chat

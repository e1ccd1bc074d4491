// Chat templates (llama2, llama3, chatml, plain) rendered as loss-tagged segments, and their Jinja sources for
// tokenizer_config.json. The renderings match the official Hugging Face chat templates character for character.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ft::data {

class Tokenizer;

struct ChatMessage {
  std::string role;     // system | user | assistant
  std::string content;
};

// One piece of a rendered sample. Text pieces are encoded by sentencepiece (adjacent text pieces with the same
// loss flag are encoded together); special pieces map to one id when the tokenizer has them as a piece and are
// encoded as text otherwise; BOS/EOS are the tokenizer's ids.
struct Segment {
  enum class Kind { kText, kSpecial, kBos, kEos };
  Kind kind = Kind::kText;
  std::string text;   // kText / kSpecial: the characters
  bool loss = false;  // the tokens of this segment are training targets
};

// The built-in templates' names (data.template also accepts auto: the model's own template, else plain).
const std::vector<std::string>& template_names();
// Throws ft::ConfigError for names that are neither auto nor built-in.
void check_template_name(const std::string& name);

// Renders `messages` with template `name`; loss only on assistant turns, including their end-of-turn token.
// `add_generation_prompt` appends the assistant header for inference. Roles must be system (first only), user or
// assistant; llama2 also needs user/assistant alternation. Violations throw ft::Error naming the problem.
// BOS: llama2, llama3 and plain put bos_token where the official templates do; chatml has none.
std::vector<Segment> render_chat(const std::string& name, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt = false);

// The markers built-in template `name` writes as special tokens (llama3: <|start_header_id|> ..., chatml:
// <|im_start|> <|im_end|>); empty for templates without any.
std::vector<std::string> template_markers(const std::string& name);
// Throws ft::ConfigError when `tokenizer` lacks one of template `name`'s markers as a single token: they would be
// trained as plain text and the model would never learn to end its turn.
void check_template_markers(const std::string& name, const Tokenizer& tokenizer);

// The Jinja `chat_template` of tokenizer_config.json for template `name` (official strings for llama2/llama3/chatml;
// empty for auto, whose model directory keeps its own).
std::string chat_template_jinja(const std::string& name);

// Segments as a string, BOS/EOS written as `bos`/`eos` (what apply_chat_template prints).
std::string segments_to_string(const std::vector<Segment>& segments, const std::string& bos = "<s>",
                               const std::string& eos = "</s>");

struct TokenizedSample {
  std::vector<int32_t> tokens;  // token ids of the sample
  std::vector<uint8_t> loss;    // per token: 1 when the token is a training target (predicted from its prefix)
};

// Encodes segments to ids and a per-token loss mask. Text runs are encoded one by one; a run after the first that
// starts with a space drops that space when the tokenizer adds a dummy prefix (the prefix stands for it), so
// "Answer:" + " 567" gives the pieces of "▁567" rather than "▁▁567".
TokenizedSample tokenize_segments(const Tokenizer& tokenizer, const std::vector<Segment>& segments);

}  // namespace ft::data

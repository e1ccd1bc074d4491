// Built-in chat templates rendered as loss-tagged segments, and their Jinja sources for tokenizer_config.json:
// llama2, llama3, chatml and gemma match the official Hugging Face chat templates character for character (gemma:
// Gemma 3's, the system message folded into the first user turn); mistral-v1, mistral-v3 and mistral-tekken give the
// ids of Mistral's reference encoder (mistral-common) for its tokenizer versions; plain is the project's own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ft::tok {
class Tokenizer;
}
namespace ft::chat {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// One piece of a rendered sample. Text pieces are encoded by sentencepiece (adjacent text pieces with the same
// loss flag are encoded together); special pieces map to one id when the tokenizer has them as a piece and are
// encoded as text otherwise; BOS/EOS are the tokenizer's ids.
// kEncoded: text encoded by one encode() call of its own, as mistral-common encodes each message (never merged with
//   its neighbours; text spelling a special token stays text); a leading space stands for the word marker the
//   tokenizer prepends (sentencepiece's dummy prefix) and is dropped before encoding when the tokenizer adds one.
// kJoined: text encoded in one piece with the kJoined pieces next to it (up to the next special token, BOS or EOS),
//   as apply_chat_template tokenizes its rendered string; a token is a target when its first byte lies in a piece
//   with `loss` (text spelling a special token stays text).
struct Segment {
  enum class Kind { kText, kSpecial, kBos, kEos, kEncoded, kJoined };
  Kind kind = Kind::kText;
  std::string text;   // kText / kSpecial: the characters
  bool loss = false;  // the tokens of this segment are training targets
};

// The built-in templates' names: llama2, llama3, chatml, plain, mistral-v1, mistral-v3, mistral-tekken, gemma.
// data.template also accepts auto (the model's own template, else plain) and mistral (the variant the tokenizer
// needs, see resolve_template).
const std::vector<std::string>& template_names();
// Throws ft::ConfigError for names that are neither auto, mistral nor built-in.
void check_template_name(const std::string& name);

// The template `name` stands for with `tokenizer`: mistral becomes mistral-v3 when [INST] and [/INST] are control
// tokens of a tokenizer with a word marker (sentencepiece v2/v3, its tokenizer.json), mistral-tekken when they are
// special tokens of one without (tekken.json, Mistral-Nemo's tokenizer.json), else mistral-v1 ([INST] as text,
// v0.1's sentencepiece). mistral-common's v7+ formats ([SYSTEM_PROMPT] blocks: a sentencepiece v7 model, a tekken
// file of version v7 or later) are not built in: ConfigError pointing to data.template auto. Other names unchanged.
std::string resolve_template(const std::string& name, const tok::Tokenizer& tokenizer);

// Renders `messages` with template `name` (a built-in name; mistral must be resolved first: ConfigError); loss only
// on assistant turns, including their end-of-turn token. `add_generation_prompt` appends the assistant header for
// inference. Roles must be system, user or assistant, and violations throw ft::Error naming the problem:
// - llama2, llama3, chatml, plain, gemma: a system message only first; llama2 and gemma need user/assistant
//   alternation (gemma folds the system message into the first user turn as Gemma 3's template does).
// - mistral-*: mistral-common's rules (its fine-tuning validation, or with `add_generation_prompt` its serving
//   one): consecutive messages of one role are joined with "\n\n", system messages anywhere but after an assistant
//   message form the system prompt (v1: before the first user message; v3/tekken: before the last), an empty user
//   message is put first when the conversation starts otherwise, assistant messages must not be empty, and the
//   conversation ends with an assistant message (a user message for a prompt). One BOS; each message is encoded on
//   its own; assistant turns end with EOS; v3/tekken strip trailing spaces of assistant messages.
// BOS: llama2, llama3, plain, gemma and mistral put bos_token where their references do; chatml has none.
std::vector<Segment> render_chat(const std::string& name, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt = false);

// The markers built-in template `name` writes as special tokens (llama3: <|start_header_id|> ..., chatml:
// <|im_start|> <|im_end|>, gemma: <start_of_turn> <end_of_turn>, mistral-v3/tekken: [INST] [/INST]); empty for
// templates without any.
std::vector<std::string> template_markers(const std::string& name);
// Throws ft::ConfigError when `tokenizer` lacks one of template `name`'s markers (mistral: of the variant
// resolve_template picks) as a single token: they would be trained as plain text and the model would never learn to
// end its turn.
void check_template_markers(const std::string& name, const tok::Tokenizer& tokenizer);

// The Jinja `chat_template` of tokenizer_config.json for template `name`: official strings for llama2/llama3/chatml,
// for the others a template that transformers renders exactly as render_chat (mistral-*: including mistral-common's
// joining of messages, system prompt placement and its errors via raise_exception). Empty for auto, whose model
// directory keeps its own, and for an unresolved mistral (pass resolve_template's name).
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
TokenizedSample tokenize_segments(const tok::Tokenizer& tokenizer, const std::vector<Segment>& segments);

}  // namespace ft::chat

// Tokenizers read from Hugging Face tokenizer.json, tiktoken BPE files (Llama 3's original/tokenizer.model) and
// Mistral's tekken.json, producing the same ids as the reference Python packages (tokenizers, tiktoken,
// mistral-common). No LibTorch dependency.
//
// Errors: a malformed or unsupported file throws ft::ConfigError naming the file, the JSON path (or line) and what
// is wrong. Encoding text that is not valid UTF-8 throws ft::Error naming the byte offset (the references take
// Python str and so never see invalid UTF-8; replacing it silently would hide corrupt data).
//
// Thread safety: every const member may be called concurrently (encode_batch does); add_tokens may not run
// concurrently with anything else.
//
// tokenizer.json support (anything else is a ConfigError naming the component type and its JSON path):
//   model: BPE (vocab; merges as "a b" or ["a", "b"]; byte_fallback, ignore_merges, unk_token, fuse_unk,
//          continuing_subword_prefix, end_of_word_suffix; dropout must be null or 0). Not WordPiece/Unigram/WordLevel.
//   normalizer: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace (String/Regex), Prepend, Sequence.
//   pre_tokenizer: ByteLevel, Split (String/Regex; all behaviours; invert), Metaspace (prepend_scheme
//          always/first/never, split), Digits, Whitespace, WhitespaceSplit, Punctuation, CharDelimiterSplit, Sequence.
//   post_processor (prefix/suffix only): TemplateProcessing ("single"), ByteLevel, RobertaProcessing,
//          BertProcessing, Sequence.
//   decoder: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence.
//   added_tokens: special, lstrip, rstrip, single_word, normalized, matched leftmost-longest before
//          normalization (non-normalized ones) and after it (normalized ones), as tokenizers' AddedVocabulary.
// "truncation" and "padding" are ignored: encode never truncates or pads (the caller does).
// Regexes run on PCRE2 with \s and \w rewritten to the references' Unicode definitions; characters assigned after
// PCRE2's / ICU's Unicode version (14 / 15 on Debian 12) may classify differently from the Rust crates.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft::tok {

struct EncodeOptions {
  // false (default, like `tokenizers`): text that spells an added token becomes that token's id.
  // true: added tokens marked special are NOT matched and stay plain text (transformers' split_special_tokens=True);
  // non-special added tokens are still matched.
  bool split_special = false;
};

struct Encoding {
  std::vector<int32_t> ids;
  // Per token, the byte range [begin, end) of the encoded text (the original, un-normalized input) it came from:
  // tokenizers' Encoding.offsets for encode(text, add_special_tokens=False), in UTF-8 bytes instead of
  // characters. Tokens sharing one character (byte fallback, byte-level pieces of a multi-byte character) get that
  // character's range. Monotonic: begin of token i+1 >= begin of token i.
  std::vector<std::pair<size_t, size_t>> offsets;
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  virtual std::string kind() const = 0;  // "tokenizer.json" | "tiktoken" | "tekken"
  virtual const std::filesystem::path& file() const = 0;
  // Like tokenizers' Tokenizer.encode(text, add_special_tokens=False).ids (normalizer, pre-tokenizer, model,
  // added tokens). tiktoken: like tiktoken's encode(allowed_special="all") (split_special: disallowed_special=()).
  // tekken: like mistral-common's Tekkenizer.encode(text, bos=False, eos=False), which never matches control
  // tokens in text; tokens added with add_tokens are matched.
  // Throws ft::Error if `text` is not valid UTF-8.
  virtual std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const = 0;
  // encode() plus offsets (for loss masks over a rendered chat template). Same ids as encode(). tiktoken/tekken
  // (no reference offsets): each token's bytes widened to whole characters.
  virtual Encoding encode_with_offsets(std::string_view text, const EncodeOptions& opts = {}) const = 0;
  // The post-processor's tokens around a single sequence (what add_special_tokens=True adds, e.g. Llama 3's BOS
  // 128000). tiktoken (Llama 3 spec): <|begin_of_text|>; tekken: <s>.
  virtual std::vector<int32_t> prefix_tokens() const = 0;
  virtual std::vector<int32_t> suffix_tokens() const = 0;
  // Like tokenizers' decode(ids, skip_special_tokens). Invalid UTF-8 from byte tokens becomes U+FFFD as the
  // reference does. Ids outside the vocabulary are skipped (as tokenizers does).
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual int64_t vocab_size() const = 0;  // max id + 1, added tokens included
  // Vocab or added token string. tiktoken/tekken tokens are raw bytes; they are named by their GPT-2 byte-level
  // spelling ("Ġthe"), as in the tokenizer.json that transformers converts them to.
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;  // raw vocab string (e.g. "Ġthe")
  virtual bool is_special(int32_t id) const = 0;  // added token with special=true / tiktoken special / tekken control
  // Appends new added tokens (ids vocab_size(), vocab_size()+1, ...; existing ones keep their id) — used by
  // `tokenizer.add_tokens`. Returns their ids. As tokenizers does, a string already in the model vocabulary keeps
  // its id but becomes an added token (matched before pre-tokenization). Added tokens are normalized=!special.
  virtual std::vector<int32_t> add_tokens(const std::vector<std::string>& tokens, bool special) = 0;
  // Writes the tokenizer into `dir` under its original file name. tokenizer.json: the original JSON with the new
  // added_tokens appended. tiktoken/tekken: the file as loaded; throws ConfigError if tokens were added (these
  // formats cannot hold them).
  virtual void save(const std::filesystem::path& dir) const = 0;
  // Encodes many texts on `threads` threads (0 = hardware concurrency); result order = input order.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts, int threads = 0,
                                                 const EncodeOptions& opts = {}) const;
};

std::unique_ptr<TextTokenizer> load_tokenizer_json(const std::filesystem::path& file);

// tiktoken BPE file (base64 token + rank per line). With no explicit specials: Llama 3's split pattern and its 256
// special tokens (<|begin_of_text|> 128000 ... as Meta's llama3 tokenizer.py names them; reserved names fill the
// rest).
struct TiktokenSpec {
  std::string pattern;
  std::vector<std::pair<std::string, int32_t>> specials;
  // Ids of the prefix/suffix tokens (add_special_tokens=True); llama3_tiktoken_spec sets <|begin_of_text|>.
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};
TiktokenSpec llama3_tiktoken_spec(int32_t num_base_tokens);
std::unique_ptr<TextTokenizer> load_tiktoken(const std::filesystem::path& file, const TiktokenSpec& spec);
std::unique_ptr<TextTokenizer> load_tekken(const std::filesystem::path& file);

// Picks by content: JSON with "model" -> tokenizer.json; JSON with "config"+"vocab" -> tekken; lines of
// "<base64> <int>" -> tiktoken (Llama 3 spec). Anything else (a sentencepiece model included): ConfigError naming
// the file.
std::unique_ptr<TextTokenizer> load_text_tokenizer(const std::filesystem::path& file);

}  // namespace ft::tok

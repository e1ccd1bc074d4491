// The tokenizer of a model: sentencepiece (.model), Hugging Face tokenizer.json, tiktoken (Llama 3's
// original/tokenizer.model) or Mistral's tekken.json, chosen by the file, with the special ids the model directory
// declares; and the sentencepiece trainer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"

namespace sentencepiece {
class SentencePieceProcessor;
}
namespace ft::tok {
class TextTokenizer;
}

namespace ft::data {

class Tokenizer {
 public:
  // The tokenizer file in `path`: the file itself, or in a directory what transformers' AutoTokenizer would use
  // (tokenizer.json first), then tokenizer.model, tekken.json, original/tokenizer.model. ConfigError if none.
  static std::filesystem::path resolve(const std::filesystem::path& path);
  // Loads the tokenizer at `path` (file or directory, see resolve). `model_dir`, when given, may hold config.json
  // and generation_config.json (bos/eos/pad_token_id), tokenizer_config.json and special_tokens_map.json
  // (bos/eos/pad_token as strings or {"content": ...}); later files override earlier ones and the ids stored in
  // the tokenizer, as transformers does; without `model_dir`, the directory of the tokenizer file. A file that is
  // none of the four kinds, or is malformed: ConfigError.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& path,
                                         const std::filesystem::path& model_dir = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // No BOS/EOS added. Text spelling a special token of the tokenizer becomes that token unless `split_special`
  // (then it stays text, as transformers' split_special_tokens=True); sentencepiece never matches control pieces.
  std::vector<int64_t> encode(std::string_view text, bool split_special = false) const;
  // encode() with each token's byte range [begin, end) in `text` (monotonic). For sentencepiece, text that spells
  // a control piece (<s>, </s>, [INST] ...) becomes that piece unless `split_special`, and the text between is
  // encoded on its own, as transformers' (legacy) LlamaTokenizer does.
  struct Encoding {
    std::vector<int64_t> ids;
    std::vector<std::pair<size_t, size_t>> offsets;
  };
  Encoding encode_with_offsets(std::string_view text, bool split_special = false) const;
  // Special tokens (BOS, EOS, chat markers) are left out, as sentencepiece's decode does.
  std::string decode(const std::vector<int64_t>& ids) const;

  int64_t bos_id() const { return bos_; }
  int64_t eos_id() const { return eos_; }
  // A real id different from EOS, used only for padding (labels mask it): the model's pad, else unk.
  int64_t pad_id() const { return pad_; }
  int64_t vocab_size() const;
  // True when every encode() starts with a word marker (sentencepiece's add_dummy_prefix, Metaspace "always").
  bool adds_dummy_prefix() const { return dummy_prefix_; }
  int64_t piece_to_id(std::string_view piece) const;  // -1 if `piece` is not in the vocabulary
  std::string id_to_piece(int64_t id) const;
  bool is_special(int64_t id) const;  // control / special token (BOS, EOS, chat markers)
  // "sentencepiece", "tokenizer.json", "tiktoken" or "tekken".
  std::string kind() const;
  // A hash of the tokenizer file's bytes and the special ids, for cache keys.
  uint64_t fingerprint() const { return fingerprint_; }
  const std::filesystem::path& model_file() const { return model_file_; }

 private:
  Tokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // sentencepiece, or
  std::unique_ptr<tok::TextTokenizer> text_;                    // the other three kinds
  std::vector<std::string> sp_specials_;  // sentencepiece: control pieces, longest first (matched in text)
  std::filesystem::path model_file_;
  int64_t bos_ = -1, eos_ = -1, pad_ = -1;
  uint64_t fingerprint_ = 0;
  bool dummy_prefix_ = false;
};

struct TokenizerTrainOptions {
  DataFields fields;                  // JSON field names whose strings are collected from JSON Lines inputs
  std::vector<std::string> user_defined_symbols;  // pieces kept whole (e.g. chat template markers)
  double character_coverage = 1.0;    // 1.0 keeps every character seen (byte fallback covers the rest)
};

// Trains a sentencepiece model of `vocab_size` pieces ("bpe" or "unigram") on `inputs` and writes
// out_dir/tokenizer.model and out_dir/tokenizer.vocab. Files ending in .jsonl/.json are read as JSON Lines and
// every string under the configured text/prompt/input/completion/content fields is a sentence; any other file is
// plain text, one sentence per line. Single-threaded and unshuffled, so the result is deterministic.
// Ids: unk 0, bos 1, eos 2, pad 3 (Llama layout plus a real pad); digits are split; byte fallback on.
void train_tokenizer(const std::vector<std::filesystem::path>& inputs, int64_t vocab_size,
                     const std::string& model_type, const std::filesystem::path& out_dir,
                     const TokenizerTrainOptions& options = {});

}  // namespace ft::data

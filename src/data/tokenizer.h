// A sentencepiece tokenizer with the special ids a model directory declares, and the sentencepiece trainer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ft::data {

class Tokenizer {
 public:
  // Loads a sentencepiece model. `model_dir`, when given, may hold config.json (bos/eos/pad_token_id),
  // tokenizer_config.json and special_tokens_map.json (bos/eos/pad_token as strings or {"content": ...});
  // those override the ids stored in the model, as Hugging Face does.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& model_file,
                                         const std::filesystem::path& model_dir = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int64_t> encode(std::string_view text) const;  // no BOS/EOS added
  std::string decode(const std::vector<int64_t>& ids) const;

  int64_t bos_id() const { return bos_; }
  int64_t eos_id() const { return eos_; }
  // A real id different from EOS, used only for padding (labels mask it): the model's pad, else unk.
  int64_t pad_id() const { return pad_; }
  int64_t vocab_size() const;
  // True when sentencepiece prepends a word marker to every encode() (add_dummy_prefix, as Llama's models do).
  bool adds_dummy_prefix() const { return dummy_prefix_; }
  int64_t piece_to_id(std::string_view piece) const;  // -1 if `piece` is not in the vocabulary
  std::string id_to_piece(int64_t id) const;
  // A hash of the model file's bytes and the special ids, for cache keys.
  uint64_t fingerprint() const { return fingerprint_; }
  const std::filesystem::path& model_file() const { return model_file_; }

 private:
  Tokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
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

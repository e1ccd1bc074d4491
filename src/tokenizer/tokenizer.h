// The tokenizer of a model: sentencepiece (.model), Hugging Face tokenizer.json, tiktoken (Llama 3's
// original/tokenizer.model) or Mistral's tekken.json, chosen by the file, with the special ids the model directory
// declares. The front end every other part uses (tokenizer/sentencepiece_train.h trains a sentencepiece model).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
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
class AddedVocabulary;

class Tokenizer {
 public:
  // The tokenizer file in `path`: the file itself, or in a directory what transformers' AutoTokenizer would use
  // (tokenizer.json first), then tokenizer.model, tekken.json, original/tokenizer.model. ConfigError if none.
  static std::filesystem::path resolve(const std::filesystem::path& path);
  // Loads the tokenizer at `path` (file or directory, see resolve). `model_dir`, when given, may hold config.json
  // and generation_config.json (bos/eos/pad_token_id), tokenizer_config.json and special_tokens_map.json
  // (bos/eos/pad_token as strings or {"content": ...}); later files override earlier ones and the ids stored in
  // the tokenizer, as transformers does; without `model_dir`, the directory of the tokenizer file. For
  // sentencepiece, tokenizer_config.json's added_tokens_decoder entries past the model's pieces become added tokens
  // (how an exported model keeps tokenizer.add_tokens). A file that is none of the four kinds, or is malformed:
  // ConfigError.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& path,
                                         const std::filesystem::path& model_dir = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // No BOS/EOS added. Text spelling a special token of the tokenizer becomes that token unless `split_special`
  // (then it stays text, as transformers' split_special_tokens=True); sentencepiece matches its added tokens but
  // never its control pieces.
  std::vector<int64_t> encode(std::string_view text, bool split_special = false) const;
  // encode() with each token's byte range [begin, end) in `text` (monotonic). For sentencepiece, text that spells
  // a control piece (<s>, </s>, [INST] ...) becomes that piece unless `split_special`, and the text between is
  // encoded on its own, as transformers' (legacy) LlamaTokenizer does.
  struct Encoding {
    std::vector<int64_t> ids;
    std::vector<std::pair<size_t, size_t>> offsets;
  };
  Encoding encode_with_offsets(std::string_view text, bool split_special = false) const;
  // Special tokens (BOS, EOS, chat markers) are left out unless `skip_special` is false (then added tokens are
  // written as their text; sentencepiece's control pieces stay out), as decode(skip_special_tokens) does.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const;

  // tokenizer.add_tokens: adds `tokens` as special tokens, as transformers' add_special_tokens does. A token the
  // vocabulary already has keeps its id and becomes an added token (matched whole in text unless split_special);
  // a new one gets the next id after the vocabulary (vocab_size() grows by one), is matched whole in text by
  // encode() and encode_with_offsets() (unless split_special), and decodes to its text. sentencepiece models cannot
  // hold new pieces: the tokens live in a layer in front of the model and are saved in tokenizer_config.json's
  // added_tokens_decoder, which load() reads back. tiktoken and tekken files cannot hold new tokens either, and
  // nothing else can carry them for transformers, so a new token for those is a ConfigError. Returns each token's
  // id and whether this call created it (the model needs a new embedding row for it).
  struct AddedId {
    int64_t id = -1;
    bool created = false;
  };
  std::vector<AddedId> add_tokens(const std::vector<std::string>& tokens);
  // Every token add_tokens() was given, in order, with its id (what tokenizer_config.json lists) and whether it was
  // new to the vocabulary.
  struct AddedToken {
    std::string content;
    int64_t id = -1;
    bool created = false;
  };
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  // Writes the tokenizer file into `dir` under its own name: tokenizer.json with the added tokens appended to its
  // added_tokens; sentencepiece and the others as loaded (tiktoken/tekken refuse new tokens in add_tokens already).
  void save(const std::filesystem::path& dir) const;

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
  // A hash of the tokenizer file's bytes, the special ids and the added tokens, for cache keys.
  uint64_t fingerprint() const { return fingerprint_; }
  const std::filesystem::path& model_file() const { return model_file_; }

 private:
  Tokenizer() = default;
  // sentencepiece: a token added in front of the model (id >= sp_pieces_ for new ones).
  void sp_add(const std::string& content, int64_t id, bool special);  // callers rebuild the matchers
  void sp_read_added_tokens(const nlohmann::json& decoder, const std::filesystem::path& file);
  std::vector<int64_t> sp_encode(std::string_view text) const;
  size_t sp_space_after_added(std::string_view chunk, bool after_added) const;  // 1: encode the chunk without its space
  void update_fingerprint();

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // sentencepiece, or
  std::unique_ptr<tok::TextTokenizer> text_;                   // the other three kinds
  // sentencepiece: the added tokens (add_tokens, tokenizer_config.json's added_tokens_decoder), matched by encode();
  // and those plus the control pieces, matched by encode_with_offsets() (as transformers' LlamaTokenizer does).
  std::unique_ptr<tok::AddedVocabulary> sp_added_, sp_matched_;
  int64_t sp_pieces_ = 0;          // sentencepiece: the model's piece count
  int64_t sp_vocab_ = 0;           // sentencepiece: pieces plus the new added tokens
  std::vector<AddedToken> added_;  // what add_tokens() was given
  uint64_t file_fingerprint_ = 0;
  std::filesystem::path model_file_;
  int64_t bos_ = -1, eos_ = -1, pad_ = -1;
  uint64_t fingerprint_ = 0;
  bool dummy_prefix_ = false;
};

}  // namespace ft::tok

// The byte-level BPE over ranks that tiktoken files and tekken.json share; the two loaders configure it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"
#include "tokenizer/text_tokenizer.h"

namespace ft::tok {

struct RankedBpeSetup {
  std::string kind;  // "tiktoken" | "tekken"
  std::filesystem::path file;
  std::string pattern;
  std::vector<std::string> ranks;  // token bytes by rank (gaps: empty with present=false)
  std::vector<bool> present;
  int32_t id_offset = 0;             // tekken: the control tokens come first
  std::vector<AddedToken> specials;  // absolute ids
  bool match_specials = true;        // tekken never matches control tokens in text
  // tekken decodes each run of ordinary tokens on its own (mistral-common's groupby), so bytes do not join
  // across a control token; tiktoken decodes all bytes at once.
  bool decode_runs_separately = false;
  std::vector<int32_t> prefix, suffix;
};

class RankedBpeTokenizer final : public TextTokenizer {
 public:
  explicit RankedBpeTokenizer(RankedBpeSetup setup);

  std::string kind() const override { return kind_; }
  const std::filesystem::path& file() const override { return file_; }
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts) const override;
  Encoding encode_with_offsets(std::string_view text, const EncodeOptions& opts) const override;
  std::vector<int32_t> prefix_tokens() const override { return prefix_; }
  std::vector<int32_t> suffix_tokens() const override { return suffix_; }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override;
  std::vector<int32_t> add_tokens(const std::vector<std::string>& tokens, bool special) override;
  void save(const std::filesystem::path& dir) const override;

 private:
  using Offsets = std::vector<std::pair<size_t, size_t>>;
  // The one encode pipeline; offsets only when asked for.
  void encode_impl(std::string_view text, const EncodeOptions& opts, std::vector<int32_t>& ids,
                   Offsets* offsets) const;
  // text[begin, end) holds no added token.
  void encode_ordinary(std::string_view text, size_t begin, size_t end, std::vector<int32_t>& ids,
                       Offsets* offsets) const;

  std::string kind_;
  std::filesystem::path file_;
  Regex regex_;
  std::unique_ptr<BpeModel> model_;
  int32_t id_offset_;
  AddedVocabulary specials_;  // specials (matched unless match_specials_ is false)
  AddedVocabulary added_;     // from add_tokens: always matched
  bool match_specials_;
  bool decode_runs_separately_;
  std::vector<int32_t> prefix_, suffix_;
  int64_t vocab_size_;
  size_t num_added_ = 0;
};

}  // namespace ft::tok

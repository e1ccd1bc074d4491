// Added tokens (tokenizer.json's "added_tokens", tiktoken specials, tokens from add_tokens): found in the raw
// text before normalization and pre-tokenization, like tokenizers' AddedVocabulary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/piece.h"

namespace ft::tok {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;       // also swallows the whitespace before it
  bool rstrip = false;       // also swallows the whitespace after it
  bool single_word = false;  // only matches when not inside a word
  bool normalized = true;    // matched against the normalized text (and normalized itself first)
  // What id_to_token/decode give: tokenizers (0.23) reports a normalized token by its normalized content
  // ("Hello" under Prepend("▁") decodes as "▁Hello"). Set by AddedVocabulary::rebuild.
  std::string display;
};

// A token matched as written, never normalized: the specials and controls of the formats whose files carry no
// added-token flags (tiktoken, tekken, sentencepiece).
inline AddedToken verbatim_token(std::string content, int32_t id, bool special) {
  AddedToken t;
  t.content = std::move(content);
  t.id = id;
  t.special = special;
  t.normalized = false;
  return t;
}

// Leftmost-longest multi-pattern search over bytes (what tokenizers' aho-corasick MatchKind::LeftmostLongest
// yields). Patterns are few and short, so a byte trie with a first-byte table is plenty.
class TokenTrie {
 public:
  struct Match {
    size_t start, end;
    int32_t value;
  };
  void clear();
  void insert(std::string_view pattern, int32_t value);
  void find_all(std::string_view s, std::vector<Match>& out) const;
  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t value = -1;
  };
  int32_t child(int32_t node, unsigned char b) const;
  std::vector<Node> nodes_{Node{}};
  std::vector<int32_t> root_ = std::vector<int32_t>(256, -1);
};

class AddedVocabulary {
 public:
  // Adds or replaces (same content) a token; call rebuild() before matching.
  void add(const AddedToken& token);
  // Rebuilds both matchers; normalized tokens are matched in their normalized form.
  void rebuild(const Normalizer* normalizer);

  // tokenizers' extract_and_normalize: split `text` on non-normalized added tokens, normalize the remaining
  // pieces one by one, then split those on normalized added tokens. With split_special, tokens marked special
  // are skipped (left in the text). With track_offsets the pieces carry alignments to `text` (plus `base`).
  void extract_and_normalize(std::string_view text, const Normalizer* normalizer, bool split_special, Pieces& out,
                             bool track_offsets = false, size_t base = 0) const;

  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int32_t max_id() const;

 private:
  void split(Piece&& piece, const TokenTrie& trie, bool split_special, Pieces& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  TokenTrie raw_trie_, normalized_trie_;
};

}  // namespace ft::tok

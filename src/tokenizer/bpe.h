// Byte-pair encoding over a merge table, shared by tokenizer.json's BPE model and tiktoken/tekken (whose merge
// table is derived from the ranks). Thread-safe: encode_batch calls tokenize() from several threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ft::tok {

// Open-addressing map from a pair of token ids to (rank, merged id): the inner loop of BPE looks pairs up
// millions of times, and std::unordered_map's node chasing costs more than the merging itself.
class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t id;
  };
  void reserve(size_t n);
  // Later inserts of the same pair overwrite earlier ones, as collecting into a Rust HashMap does.
  void insert(int32_t a, int32_t b, Value v);
  const Value* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = make_key(a, b);
    size_t i = hash(key) & mask_;
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Value value{0, 0};
  };
  static uint64_t make_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t hash(uint64_t key) { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> 20); }
  void grow();
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Bounded, sharded word -> ids cache. A full shard is cleared rather than grown so memory stays bounded on
// corpora with long-tailed vocabularies.
class WordCache {
 public:
  explicit WordCache(size_t capacity = 1 << 17);
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;
  void insert(std::string_view word, const std::vector<int32_t>& ids) const;
  static constexpr size_t kMaxWordBytes = 256;  // longer words are rare and would crowd out useful entries

 private:
  static constexpr size_t kShards = 64;
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  size_t per_shard_;
  std::unique_ptr<Shard[]> shards_;
};

struct BpeConfig {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  // empty = none
  std::string end_of_word_suffix;         // empty = none
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  // tiktoken/tekken: the initial symbols are single bytes (the vocabulary holds raw byte strings) instead of
  // UTF-8 characters.
  bool byte_symbols = false;
};

class BpeModel {
 public:
  // `vocab[id]` is the token string of id (an empty string with `present[id] == false` marks a gap).
  BpeModel(std::vector<std::string> vocab, std::vector<bool> present, BpeConfig config);
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Registers merge number `rank` of tokens a and b; returns false (with `missing` set) if a, b or a+b is not
  // in the vocabulary.
  bool add_merge(std::string_view a, std::string_view b, int32_t rank, std::string* missing);
  // tiktoken: every split of every token into two tokens is a merge whose rank is the token's own rank.
  void derive_merges_from_ranks();

  // Appends the ids of one pre-tokenized word. Fails only when a character is unknown, there is no byte
  // fallback and the unk token is not in the vocabulary (tokenizers' UnkTokenOutOfVocabulary).
  // With `lens`, also appends each token's byte length in `word` (bypassing the word cache, which holds ids only).
  void tokenize(std::string_view word, std::vector<int32_t>& out, std::vector<uint32_t>* lens = nullptr) const;

  std::optional<int32_t> token_to_id(std::string_view token) const {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* id_to_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !present_[static_cast<size_t>(id)]) {
      return nullptr;
    }
    return &id_to_token_[static_cast<size_t>(id)];
  }
  int64_t size() const { return static_cast<int64_t>(id_to_token_.size()); }
  const BpeConfig& config() const { return config_; }

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out, std::vector<uint32_t>* lens) const;

  std::vector<std::string> id_to_token_;  // never resized after construction: vocab_ keys point into it
  std::vector<bool> present_;
  std::unordered_map<std::string_view, int32_t> vocab_;
  PairMap merges_;
  BpeConfig config_;
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> tokens (byte_fallback) or single-byte tokens (byte_symbols)
  std::unique_ptr<WordCache> cache_;
};

}  // namespace ft::tok

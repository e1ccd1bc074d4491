#include "tokenizer/bpe.h"

#include <cstdio>
#include <functional>
#include <queue>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace ft::tok {

void PairMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) {
      insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.value);
    }
  }
}

void PairMap::grow() {
  reserve(slots_.empty() ? 8 : slots_.size());
}

void PairMap::insert(int32_t a, int32_t b, Value v) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = make_key(a, b);
  size_t i = hash(key) & mask_;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == kEmpty) ++size_;
  slots_[i].key = key;
  slots_[i].value = v;
}

WordCache::WordCache(size_t capacity)
    : per_shard_(capacity / kShards + 1), shards_(std::make_unique<Shard[]>(kShards)) {}

namespace {
size_t shard_of(std::string_view word) {
  return std::hash<std::string_view>{}(word) % 64;
}
}  // namespace

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  Shard& s = shards_[shard_of(word)];
  std::lock_guard<std::mutex> lock(s.mu);
  // C++17's unordered_map has no heterogeneous lookup; short words fit the small-string buffer, so this key
  // rarely allocates.
  auto it = s.map.find(std::string(word));
  if (it == s.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(std::string_view word, const std::vector<int32_t>& ids) const {
  Shard& s = shards_[shard_of(word)];
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.map.size() >= per_shard_) s.map.clear();
  s.map.emplace(std::string(word), ids);
}

BpeModel::BpeModel(std::vector<std::string> vocab, std::vector<bool> present, BpeConfig config)
    : id_to_token_(std::move(vocab)),
      present_(std::move(present)),
      config_(std::move(config)),
      cache_(std::make_unique<WordCache>()) {
  vocab_.reserve(id_to_token_.size());
  for (size_t i = 0; i < id_to_token_.size(); ++i) {
    if (present_[i]) vocab_.emplace(id_to_token_[i], static_cast<int32_t>(i));
  }
  if (config_.unk_token) {
    if (auto id = token_to_id(*config_.unk_token)) unk_id_ = *id;
  }
  byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    std::string key;
    if (config_.byte_symbols) {
      key.push_back(static_cast<char>(b));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      key = buf;
    }
    if (auto id = token_to_id(key)) byte_ids_[static_cast<size_t>(b)] = *id;
  }
}

bool BpeModel::add_merge(std::string_view a, std::string_view b, int32_t rank, std::string* missing) {
  auto ia = token_to_id(a);
  if (!ia) {
    *missing = std::string(a);
    return false;
  }
  auto ib = token_to_id(b);
  if (!ib) {
    *missing = std::string(b);
    return false;
  }
  std::string merged(a);
  const std::string& prefix = config_.continuing_subword_prefix;
  if (!prefix.empty() && b.substr(0, prefix.size()) == prefix) {
    merged.append(b.substr(prefix.size()));
  } else {
    merged.append(b);
  }
  auto im = token_to_id(merged);
  if (!im) {
    *missing = merged;
    return false;
  }
  merges_.insert(*ia, *ib, {rank, *im});
  return true;
}

void BpeModel::derive_merges_from_ranks() {
  merges_.reserve(id_to_token_.size() * 4);
  for (size_t id = 0; id < id_to_token_.size(); ++id) {
    if (!present_[id]) continue;
    const std::string_view t = id_to_token_[id];
    for (size_t k = 1; k < t.size(); ++k) {
      auto a = token_to_id(t.substr(0, k));
      if (!a) continue;
      auto b = token_to_id(t.substr(k));
      if (!b) continue;
      // The rank of a pair is the rank of the token it forms: exactly tiktoken's byte_pair_merge order.
      merges_.insert(*a, *b, {static_cast<int32_t>(id), static_cast<int32_t>(id)});
    }
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out, std::vector<uint32_t>* lens) const {
  if (word.empty()) return;
  if (config_.ignore_merges) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      if (lens != nullptr) lens->push_back(static_cast<uint32_t>(word.size()));
      return;
    }
  }
  if (lens != nullptr) {
    merge_word(word, out, lens);
    return;
  }
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  if (cacheable && cache_->lookup(word, out)) return;
  std::vector<int32_t> ids;
  merge_word(word, ids, nullptr);
  if (cacheable) cache_->insert(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;  // 0 once merged into its left neighbour
};

struct Merge {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};

// Lowest rank first, then leftmost: the order of tokenizers' BinaryHeap<Merge> (and of tiktoken's scan).
struct MergeAfter {
  bool operator()(const Merge& a, const Merge& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
  }
};

using MergeQueue = std::priority_queue<Merge, std::vector<Merge>, MergeAfter>;

// Appends a symbol to the word's doubly linked list.
void push_symbol(std::vector<Symbol>& symbols, int32_t id, size_t len) {
  const auto n = static_cast<int32_t>(symbols.size());
  if (n > 0) symbols.back().next = n;
  symbols.push_back({id, n - 1, -1, static_cast<int32_t>(len)});
}

// tiktoken/tekken: every byte of the word is one symbol.
std::vector<Symbol> byte_symbols(std::string_view w, const std::array<int32_t, 256>& byte_ids) {
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  for (char c : w) {
    const int32_t id = byte_ids[static_cast<unsigned char>(c)];
    if (id < 0) {
      throw ft::Error("tokenizer vocabulary has no token for byte " + std::to_string(static_cast<unsigned char>(c)),
                      "the tiktoken/tekken file is incomplete: every single byte must be a token");
    }
    push_symbol(symbols, id, 1);
  }
  return symbols;
}

// tokenizer.json: every UTF-8 character of the word is one symbol (or its bytes, or an unk).
// Mirrors tokenizers' BPE::merge_word, quirks included: byte-fallback bytes are pushed before a pending unk
// and include the continuing_subword_prefix's bytes.
class CharSymbols {
 public:
  CharSymbols(const BpeModel& model, const std::array<int32_t, 256>& byte_ids, std::optional<int32_t> unk_id)
      : model_(model), config_(model.config()), byte_ids_(byte_ids), unk_id_(unk_id) {}

  // Consumes the splitter: it holds the symbols it returns.
  std::vector<Symbol> split(std::string_view w) && {
    symbols_.reserve(w.size());
    size_t i = 0;
    while (i < w.size()) {
      const size_t start = i;
      i += unicode::utf8_len(static_cast<unsigned char>(w[i]));
      const size_t byte_len = i - start;
      const std::string_view piece = affixed(w.substr(start, byte_len), start == 0, i >= w.size());
      if (const std::optional<int32_t> id = model_.token_to_id(piece)) {
        flush_unk();
        push_symbol(symbols_, *id, byte_len);
      } else if (!push_fallback_bytes(piece)) {
        push_unk(byte_len);
      }
    }
    flush_unk();
    return std::move(symbols_);
  }

 private:
  // The character as the vocabulary spells it: with the continuing_subword_prefix unless it starts the word, and
  // the end_of_word_suffix if it ends it.
  std::string_view affixed(std::string_view piece, bool is_first, bool is_last) {
    if ((is_first || config_.continuing_subword_prefix.empty()) && (!is_last || config_.end_of_word_suffix.empty())) {
      return piece;
    }
    scratch_.clear();
    if (!is_first) scratch_ += config_.continuing_subword_prefix;
    scratch_.append(piece);
    if (is_last) scratch_ += config_.end_of_word_suffix;
    return scratch_;
  }

  // byte_fallback: the piece as <0xXX> tokens, if every one of its bytes has one.
  bool push_fallback_bytes(std::string_view piece) {
    if (!config_.byte_fallback) return false;
    bool all = true;
    for (char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
    if (!all) return false;
    for (char c : piece) push_symbol(symbols_, byte_ids_[static_cast<unsigned char>(c)], 1);
    return true;
  }

  // An unknown character becomes a pending unk (fused with the one before under fuse_unk); without an unk_token
  // it is dropped.
  void push_unk(size_t byte_len) {
    if (!config_.unk_token) return;
    if (!unk_id_) {
      throw ft::Error("the BPE unk_token \"" + *config_.unk_token + "\" is not in the vocabulary",
                      "fix model.unk_token in tokenizer.json");
    }
    if (has_unk_ && config_.fuse_unk) {
      unk_len_ += byte_len;
      return;
    }
    flush_unk();
    has_unk_ = true;
    unk_tok_ = *unk_id_;
    unk_len_ = byte_len;
  }

  void flush_unk() {
    if (!has_unk_) return;
    push_symbol(symbols_, unk_tok_, unk_len_);
    has_unk_ = false;
  }

  const BpeModel& model_;
  const BpeConfig& config_;
  const std::array<int32_t, 256>& byte_ids_;
  const std::optional<int32_t> unk_id_;
  std::vector<Symbol> symbols_;
  // Pending unk (id, byte length); plain variables because GCC misreads std::optional here (-Wmaybe-uninitialized).
  bool has_unk_ = false;
  int32_t unk_tok_ = -1;
  size_t unk_len_ = 0;
  std::string scratch_;  // the affixed character
};

// Queues the merge of the symbols at `left` and `right`, if the merge table has one.
void queue_merge(const PairMap& merges, const std::vector<Symbol>& symbols, int32_t left, int32_t right,
                 MergeQueue& queue) {
  const Symbol& l = symbols[static_cast<size_t>(left)];
  const Symbol& r = symbols[static_cast<size_t>(right)];
  if (const auto* m = merges.find(l.id, r.id)) queue.push({m->rank, left, m->id});
}

// Applies the merges, lowest rank first, until none is left; merged symbols keep len 0.
void apply_merges(const PairMap& merges, std::vector<Symbol>& symbols) {
  if (symbols.size() <= 1) return;
  MergeQueue queue;
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    queue_merge(merges, symbols, static_cast<int32_t>(k), static_cast<int32_t>(k + 1), queue);
  }
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = symbols[static_cast<size_t>(top.pos)];
    if (cur.len == 0 || cur.next == -1) continue;
    const auto next_pos = static_cast<size_t>(cur.next);
    const Symbol right = symbols[next_pos];
    const auto* m = merges.find(cur.id, right.id);
    if (m == nullptr || m->id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (cur.prev >= 0) queue_merge(merges, symbols, cur.prev, top.pos, queue);
    if (cur.next >= 0) queue_merge(merges, symbols, top.pos, cur.next, queue);
  }
}

}  // namespace

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>& out, std::vector<uint32_t>* lens) const {
  std::vector<Symbol> symbols =
      config_.byte_symbols ? byte_symbols(w, byte_ids_) : CharSymbols(*this, byte_ids_, unk_id_).split(w);
  apply_merges(merges_, symbols);
  for (const Symbol& s : symbols) {
    if (s.len == 0) continue;
    out.push_back(s.id);
    if (lens != nullptr) lens->push_back(static_cast<uint32_t>(s.len));
  }
}

}  // namespace ft::tok

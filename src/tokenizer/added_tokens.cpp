#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/normalizers.h"
#include "tokenizer/unicode.h"

namespace ft::tok {

void TokenTrie::clear() {
  nodes_.assign(1, Node{});
  root_.assign(256, -1);
}

int32_t TokenTrie::child(int32_t node, unsigned char b) const {
  if (node == 0) return root_[b];
  const auto& ch = nodes_[static_cast<size_t>(node)].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, unsigned char v) { return p.first < v; });
  return it != ch.end() && it->first == b ? it->second : -1;
}

void TokenTrie::insert(std::string_view pattern, int32_t value) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char c : pattern) {
    const auto b = static_cast<unsigned char>(c);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(Node{});
      if (node == 0) {
        root_[b] = next;
      } else {
        auto& ch = nodes_[static_cast<size_t>(node)].children;
        auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, unsigned char v) { return p.first < v; });
        ch.insert(it, {b, next});
      }
    }
    node = next;
  }
  nodes_[static_cast<size_t>(node)].value = value;
}

void TokenTrie::find_all(std::string_view s, std::vector<Match>& out) const {
  if (empty()) return;
  size_t pos = 0;
  while (pos < s.size()) {
    int32_t node = root_[static_cast<unsigned char>(s[pos])];
    if (node < 0) {
      ++pos;
      continue;
    }
    size_t best_end = 0;
    int32_t best = -1;
    size_t i = pos + 1;
    while (true) {
      if (nodes_[static_cast<size_t>(node)].value >= 0) {
        best = nodes_[static_cast<size_t>(node)].value;
        best_end = i;
      }
      if (i >= s.size()) break;
      node = child(node, static_cast<unsigned char>(s[i]));
      if (node < 0) break;
      ++i;
    }
    if (best >= 0) {
      out.push_back({pos, best_end, best});
      pos = best_end;
    } else {
      ++pos;
    }
  }
}

void AddedVocabulary::add(const AddedToken& token) {
  auto it = by_content_.find(token.content);
  if (it != by_content_.end()) {
    by_id_.erase(tokens_[it->second].id);
    tokens_[it->second] = token;
    by_id_[token.id] = it->second;
    return;
  }
  by_content_.emplace(token.content, tokens_.size());
  by_id_[token.id] = tokens_.size();
  tokens_.push_back(token);
}

void AddedVocabulary::rebuild(const Normalizer* normalizer) {
  raw_trie_.clear();
  normalized_trie_.clear();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    AddedToken& t = tokens_[i];
    t.display = t.content;
    if (t.normalized) {
      if (normalizer != nullptr) normalizer->normalize(t.display);
      normalized_trie_.insert(t.display, static_cast<int32_t>(i));
    } else {
      raw_trie_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::max_id() const {
  int32_t m = -1;
  for (const auto& t : tokens_) m = std::max(m, t.id);
  return m;
}

namespace {

// The last/first code point of s (s non-empty, valid UTF-8).
char32_t last_cp(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return unicode::next_cp(s, start);
}

char32_t first_cp(std::string_view s) {
  size_t i = 0;
  return unicode::next_cp(s, i);
}

// Start of the whitespace run that ends s.
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t j = start;
    if (!unicode::is_whitespace(unicode::next_cp(s, j))) break;
    end = start;
  }
  return end;
}

size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!unicode::is_whitespace(unicode::next_cp(s, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedVocabulary::split(Piece&& piece, const TokenTrie& trie, bool split_special, Pieces& out) const {
  const std::string& s = piece.text;
  std::vector<TokenTrie::Match> matches;
  trie.find_all(s, matches);
  if (matches.empty()) {
    if (!s.empty()) out.push_back(std::move(piece));
    return;
  }
  auto emit_text = [&](size_t b, size_t e) {
    if (b >= e) return;
    Piece p;
    p.text.assign(s, b, e - b);
    p.at_start = piece.at_start && b == 0;
    if (!piece.align.empty()) p.align.assign(piece.align.begin() + static_cast<std::ptrdiff_t>(b),
                                             piece.align.begin() + static_cast<std::ptrdiff_t>(e));
    out.push_back(std::move(p));
  };
  size_t start_offset = 0;
  for (const auto& m : matches) {
    const AddedToken& t = tokens_[static_cast<size_t>(m.value)];
    if (split_special && t.special) continue;
    size_t start = m.start, stop = m.end;
    if (t.single_word) {
      const bool start_space = start == 0 || !unicode::is_word_char(last_cp(std::string_view(s).substr(0, start)));
      const bool stop_space = stop == s.size() || !unicode::is_word_char(first_cp(std::string_view(s).substr(stop)));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) start = std::max(trailing_space_start(std::string_view(s).substr(0, start)), start_offset);
    if (t.rstrip) stop += leading_space_len(std::string_view(s).substr(stop));
    emit_text(start_offset, start);
    Piece tok;
    tok.text.assign(s, start, stop - start);
    tok.id = t.id;
    if (!piece.align.empty()) tok.align.assign(piece.align.begin() + static_cast<std::ptrdiff_t>(start),
                                               piece.align.begin() + static_cast<std::ptrdiff_t>(stop));
    out.push_back(std::move(tok));
    start_offset = stop;
  }
  emit_text(start_offset, s.size());
}

void AddedVocabulary::extract_and_normalize(std::string_view text, const Normalizer* normalizer, bool split_special,
                                            Pieces& out, bool track_offsets, size_t base) const {
  Pieces first;
  Piece whole;
  whole.text = std::string(text);
  whole.at_start = true;
  if (track_offsets) whole.align = char_alignment(text, base);
  split(std::move(whole), raw_trie_, split_special, first);
  for (auto& p : first) {
    if (p.id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    if (normalizer != nullptr) {
      if (p.align.empty()) {
        normalizer->normalize(p.text);
      } else {
        normalizer->normalize(p.text, p.align);
      }
    }
    split(std::move(p), normalized_trie_, split_special, out);
  }
}

}  // namespace ft::tok

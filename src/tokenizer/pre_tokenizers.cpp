#include "tokenizer/pre_tokenizers.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "tokenizer/normalizers.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace ft::tok {

namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Part {
  size_t start, end;
  bool is_match;
};
using Parts = std::vector<Part>;

// The pattern's hits and the gaps between them, in order (one empty gap for an empty string).
Parts match_parts(const std::string& s, const Ranges& matches, bool invert) {
  Parts parts;
  if (s.empty()) {
    parts.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      if (prev != b) parts.push_back({prev, b, false});
      parts.push_back({b, e, true});
      prev = e;
    }
    if (prev != s.size()) parts.push_back({prev, s.size(), false});
  }
  if (invert) {
    for (auto& p : parts) p.is_match = !p.is_match;
  }
  return parts;
}

// Folds the parts left to right: a part joins the piece before it when `joins(is_match, previous_is_match)`.
template <class Joins>
Parts fold_forward(const Parts& parts, Joins joins) {
  Parts kept;
  kept.reserve(parts.size());
  bool previous_match = false;
  for (const auto& p : parts) {
    if (joins(p.is_match, previous_match) && !kept.empty()) {
      kept.back().end = p.end;
    } else {
      kept.push_back({p.start, p.end, false});
    }
    previous_match = p.is_match;
  }
  return kept;
}

// MergedWithNext: a hit joins the piece after it (unless the part after was a hit too), folded from the right.
Parts merge_with_next(const Parts& parts) {
  Parts kept;
  kept.reserve(parts.size());
  bool previous_match = false;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (it->is_match && !previous_match && !kept.empty()) {
      kept.back().start = it->start;
    } else {
      kept.push_back({it->start, it->end, false});
    }
    previous_match = it->is_match;
  }
  std::reverse(kept.begin(), kept.end());
  return kept;
}

// The resulting pieces; here `is_match` means "drop it" (only Removed drops anything).
Parts apply_behavior(const Parts& parts, Behavior behavior) {
  switch (behavior) {
    case Behavior::kRemoved:
      return parts;
    case Behavior::kIsolated: {
      Parts kept = parts;
      for (auto& p : kept) p.is_match = false;
      return kept;
    }
    case Behavior::kMergedWithPrevious:  // a hit joins the piece before it, unless that part was a hit too
      return fold_forward(parts, [](bool match, bool previous_match) { return match && !previous_match; });
    case Behavior::kMergedWithNext:
      return merge_with_next(parts);
    case Behavior::kContiguous:  // neighbouring hits join one piece, as do neighbouring gaps
      return fold_forward(parts, [](bool match, bool previous_match) { return match == previous_match; });
  }
  return {};
}

// One split of a piece following tokenizers' NormalizedString::split: `matches` are the pattern's hits; the
// complement fills the gaps; `behavior` decides what happens to the hits. Mirrors the Rust folds exactly,
// including their treatment of empty matches.
void split_piece(Piece& piece, const Ranges& matches, Behavior behavior, bool invert, Pieces& out) {
  const std::string& s = piece.text;
  const Parts kept = apply_behavior(match_parts(s, matches, invert), behavior);
  if (kept.size() == 1 && !kept[0].is_match && kept[0].start == 0 && kept[0].end == s.size()) {
    if (!s.empty()) out.push_back(std::move(piece));
    return;
  }
  for (const auto& k : kept) {
    if (k.is_match || k.start == k.end) continue;
    Piece p;
    p.text.assign(s, k.start, k.end - k.start);
    p.at_start = piece.at_start && k.start == 0;
    if (!piece.align.empty()) {
      p.align.assign(piece.align.begin() + static_cast<std::ptrdiff_t>(k.start),
                     piece.align.begin() + static_cast<std::ptrdiff_t>(k.end));
    }
    out.push_back(std::move(p));
  }
}

// Hits of a per-character predicate, one hit per character, as tokenizers' `impl Pattern for F: Fn(char)->bool`.
void char_matches(const std::string& s, const std::function<bool(char32_t)>& pred, Ranges& out) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    if (pred(unicode::next_cp(s, i))) out.emplace_back(start, i);
  }
}

// Applies `fn` to each text piece, collecting its replacement pieces.
template <class F>
void for_each_text_piece(Pieces& pieces, F&& fn) {
  Pieces out;
  out.reserve(pieces.size() * 2);
  for (auto& p : pieces) {
    if (p.id >= 0) {
      out.push_back(std::move(p));
    } else {
      fn(p, out);
    }
  }
  pieces.swap(out);
}

Behavior parse_behavior(const json& j, const JsonCtx& ctx) {
  const std::string b = get_string(j, "behavior", ctx);
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  ctx.at("behavior")
      .fail("unknown split behavior \"" + b +
            "\" (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(Pattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(Pieces& pieces) const override {
    Ranges m;
    for_each_text_piece(pieces, [&](Piece& p, Pieces& out) {
      m.clear();
      pattern_.find_all(p.text, m);
      split_piece(p, m, behavior_, invert_, out);
    });
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's split regex (tokenizers' byte_level.rs).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern);
  }
  void pre_tokenize(Pieces& pieces) const override {
    Ranges m;
    for_each_text_piece(pieces, [&](Piece& p, Pieces& out) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) {
        p.text.insert(0, " ");
        if (!p.align.empty()) p.align.insert(p.align.begin(), p.align.front());
      }
      if (!regex_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        return;
      }
      m.clear();
      regex_->find_all(p.text, m);
      split_piece(p, m, Behavior::kIsolated, false, out);
    });
    for (auto& p : pieces) {
      if (p.id >= 0) continue;
      if (!p.align.empty()) {
        // Each byte's character inherits the byte's alignment.
        const auto& chars = unicode::byte_level_chars();
        Align a;
        a.reserve(p.align.size() * 2);
        for (size_t i = 0; i < p.text.size(); ++i) {
          a.insert(a.end(), chars[static_cast<unsigned char>(p.text[i])].size(), p.align[i]);
        }
        p.align = std::move(a);
      }
      p.text = unicode::bytes_to_byte_level(p.text);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePre final : public PreTokenizer {
 public:
  MetaspacePre(char32_t replacement, PrependScheme scheme, bool split) : scheme_(scheme), split_(split) {
    replacement_ = replacement;
    unicode::append_utf8(rep_, replacement);
  }
  void pre_tokenize(Pieces& pieces) const override {
    Ranges m;
    for_each_text_piece(pieces, [&](Piece& p, Pieces& out) {
      std::string t;
      t.reserve(p.text.size() + rep_.size());
      const bool track = !p.align.empty();
      Align a;
      for (size_t i = 0; i < p.text.size(); ++i) {
        const size_t n = p.text[i] == ' ' ? rep_.size() : 1;
        if (n == 1) {
          t.push_back(p.text[i]);
        } else {
          t += rep_;
        }
        if (track) a.insert(a.end(), n, p.align[i]);
      }
      const bool starts = t.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start))) {
        t.insert(0, rep_);
        // Like tokenizers' prepend: the marker takes the alignment of the character it precedes.
        if (track && !a.empty()) a.insert(a.begin(), rep_.size(), a.front());
      }
      p.text = std::move(t);
      if (track) p.align = std::move(a);
      if (!split_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        return;
      }
      m.clear();
      char_matches(
          p.text, [this](char32_t c) { return c == replacement_; }, m);
      split_piece(p, m, Behavior::kMergedWithNext, false, out);
    });
  }

 private:
  char32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPre final : public PreTokenizer {
 public:
  explicit DigitsPre(bool individual) : individual_(individual) {}
  void pre_tokenize(Pieces& pieces) const override {
    Ranges m;
    for_each_text_piece(pieces, [&](Piece& p, Pieces& out) {
      m.clear();
      char_matches(p.text, unicode::is_numeric, m);
      split_piece(p, m, individual_ ? Behavior::kIsolated : Behavior::kContiguous, false, out);
    });
  }

 private:
  bool individual_;
};

class WhitespacePre final : public PreTokenizer {
 public:
  WhitespacePre() : regex_(R"(\w+|[^\w\s]+)") {}
  void pre_tokenize(Pieces& pieces) const override {
    Ranges m;
    for_each_text_piece(pieces, [&](Piece& p, Pieces& out) {
      m.clear();
      regex_.find_all(p.text, m);
      split_piece(p, m, Behavior::kRemoved, true, out);
    });
  }

 private:
  Regex regex_;
};

class WhitespaceSplitPre final : public PreTokenizer {
 public:
  void pre_tokenize(Pieces& pieces) const override {
    Ranges m;
    for_each_text_piece(pieces, [&](Piece& p, Pieces& out) {
      m.clear();
      char_matches(p.text, unicode::is_whitespace, m);
      split_piece(p, m, Behavior::kRemoved, false, out);
    });
  }
};

// Punctuation (behavior default Isolated) and CharDelimiterSplit (Removed): per-character splits.
class CharClassPre final : public PreTokenizer {
 public:
  CharClassPre(std::function<bool(char32_t)> pred, Behavior behavior) : pred_(std::move(pred)), behavior_(behavior) {}
  void pre_tokenize(Pieces& pieces) const override {
    Ranges m;
    for_each_text_piece(pieces, [&](Piece& p, Pieces& out) {
      m.clear();
      char_matches(p.text, pred_, m);
      split_piece(p, m, behavior_, false, out);
    });
  }

 private:
  std::function<bool(char32_t)> pred_;
  Behavior behavior_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> items) : items_(std::move(items)) {}
  void pre_tokenize(Pieces& pieces) const override {
    for (const auto& p : items_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& j, const JsonCtx& ctx) {
  if (j.is_null()) return nullptr;
  const std::string type = get_type(j, ctx);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPre>(get_bool(j, "add_prefix_space", true, ctx),
                                          get_bool(j, "use_regex", true, ctx));
  }
  if (type == "Split") {
    return std::make_unique<SplitPre>(parse_pattern(j, "pattern", ctx), parse_behavior(j, ctx),
                                      get_bool(j, "invert", false, ctx));
  }
  if (type == "Metaspace") {
    PrependScheme scheme = PrependScheme::kAlways;
    if (auto s = get_opt_string(j, "prepend_scheme", ctx)) {
      if (*s == "always") {
        scheme = PrependScheme::kAlways;
      } else if (*s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (*s == "never") {
        scheme = PrependScheme::kNever;
      } else {
        ctx.at("prepend_scheme").fail("unknown prepend_scheme \"" + *s + "\" (expected always, first or never)");
      }
    } else if (!get_bool(j, "add_prefix_space", true, ctx)) {
      scheme = PrependScheme::kNever;  // files written before prepend_scheme existed
    }
    return std::make_unique<MetaspacePre>(get_char(j, "replacement", ctx), scheme, get_bool(j, "split", true, ctx));
  }
  if (type == "Digits") return std::make_unique<DigitsPre>(get_bool(j, "individual_digits", false, ctx));
  if (type == "Whitespace") return std::make_unique<WhitespacePre>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPre>();
  if (type == "Punctuation") {
    const Behavior b = j.contains("behavior") ? parse_behavior(j, ctx) : Behavior::kIsolated;
    return std::make_unique<CharClassPre>(unicode::is_punctuation, b);
  }
  if (type == "CharDelimiterSplit") {
    const char32_t d = get_char(j, "delimiter", ctx);
    return std::make_unique<CharClassPre>([d](char32_t c) { return c == d; }, Behavior::kRemoved);
  }
  if (type == "Sequence") {
    const json& items = require(j, "pretokenizers", ctx);
    if (!items.is_array()) ctx.at("pretokenizers").fail("expected an array, found " + json_type_name(items));
    std::vector<std::unique_ptr<PreTokenizer>> out;
    for (size_t i = 0; i < items.size(); ++i) {
      auto p = parse_pre_tokenizer(items[i], ctx.at("pretokenizers").at(i));
      if (p) out.push_back(std::move(p));
    }
    return std::make_unique<SequencePre>(std::move(out));
  }
  unsupported_component("pre_tokenizer", type, ctx,
                        "ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation, "
                        "CharDelimiterSplit, Sequence");
}

}  // namespace ft::tok

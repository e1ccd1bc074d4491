#include "tokenizer/normalizers.h"

#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace ft::tok {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = unicode::normalize(text, form_); }
  // Per run between normalization boundaries: an unchanged run keeps its alignment; a run that normalizes
  // character by character maps each character's output to it (unicode-normalization-alignments' change counts
  // for decompositions); otherwise (a composition) output character k takes input character min(k, n-1)'s range.
  // Reorderings of combining marks inside a run may differ from the Rust crate.
  void normalize(std::string& text, Align& align) const override {
    std::string out;
    Align out_align;
    out.reserve(text.size());
    out_align.reserve(align.size());
    size_t i = 0;
    while (i < text.size()) {
      const size_t run_start = i;
      std::vector<size_t> starts;
      do {
        starts.push_back(i);
        i += unicode::utf8_len(static_cast<unsigned char>(text[i]));
        size_t j = i;
        if (i >= text.size() || unicode::has_norm_boundary_before(unicode::next_cp(text, j), form_)) break;
      } while (true);
      const std::string_view run(text.data() + run_start, i - run_start);
      const std::string norm = unicode::normalize(run, form_);
      if (norm == run) {
        out.append(run);
        out_align.insert(out_align.end(), align.begin() + static_cast<std::ptrdiff_t>(run_start),
                         align.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      std::string per_char;
      std::vector<size_t> ends;
      for (size_t c = 0; c < starts.size(); ++c) {
        const size_t e = c + 1 < starts.size() ? starts[c + 1] : i;
        per_char += unicode::normalize(std::string_view(text).substr(starts[c], e - starts[c]), form_);
        ends.push_back(per_char.size());
      }
      if (per_char == norm) {
        size_t pos = 0;
        for (size_t c = 0; c < starts.size(); ++c) {
          out_align.insert(out_align.end(), ends[c] - pos, align[starts[c]]);
          pos = ends[c];
        }
        out += norm;
        continue;
      }
      size_t k = 0, n = 0;
      while (k < norm.size()) {
        const size_t len = unicode::utf8_len(static_cast<unsigned char>(norm[k]));
        const auto src = align[starts[std::min(n, starts.size() - 1)]];
        out_align.insert(out_align.end(), len, src);
        k += len;
        ++n;
      }
      out += norm;
    }
    text = std::move(out);
    align = std::move(out_align);
  }

 private:
  unicode::NormForm form_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode::lowercase(text); }
  // Character by character, as tokenizers' lowercase: all of a character's lowercase maps to it.
  void normalize(std::string& text, Align& align) const override {
    std::string out;
    Align out_align;
    out.reserve(text.size());
    out_align.reserve(align.size());
    size_t i = 0;
    while (i < text.size()) {
      const size_t start = i;
      i += unicode::utf8_len(static_cast<unsigned char>(text[start]));
      const std::string low = unicode::lowercase(std::string_view(text).substr(start, i - start));
      out += low;
      out_align.insert(out_align.end(), low.size(), align[start]);
    }
    text = std::move(out);
    align = std::move(out_align);
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    const auto [begin, end] = bounds(text);
    text = text.substr(begin, end - begin);
  }
  void normalize(std::string& text, Align& align) const override {
    const auto [begin, end] = bounds(text);
    text = text.substr(begin, end - begin);
    align = Align(align.begin() + static_cast<std::ptrdiff_t>(begin), align.begin() + static_cast<std::ptrdiff_t>(end));
  }

 private:
  std::pair<size_t, size_t> bounds(const std::string& text) const {
    size_t begin = 0, end = text.size();
    if (left_) {
      size_t i = 0;
      while (i < end) {
        size_t j = i;
        if (!unicode::is_whitespace(unicode::next_cp(text, j))) break;
        i = j;
      }
      begin = i;
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t j = start;
        if (!unicode::is_whitespace(unicode::next_cp(text, j))) break;
        end = start;
      }
    }
    return {begin, end};
  }

  bool left_, right_;
};

class Replace final : public Normalizer {
 public:
  Replace(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }
  // tokenizers inserts the content as new characters after the match, so they share the alignment of the
  // match's last byte (of the byte before an empty match).
  void normalize(std::string& text, Align& align) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    pattern_.find_all(text, matches);
    if (matches.empty()) return;
    std::string out;
    Align out_align;
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      out.append(text, prev, b - prev);
      out_align.insert(out_align.end(), align.begin() + static_cast<std::ptrdiff_t>(prev),
                       align.begin() + static_cast<std::ptrdiff_t>(b));
      out += content_;
      const std::pair<size_t, size_t> src = e > 0 ? align[e - 1] : std::pair<size_t, size_t>{0, 0};
      out_align.insert(out_align.end(), content_.size(), src);
      prev = e;
    }
    out.append(text, prev, std::string::npos);
    out_align.insert(out_align.end(), align.begin() + static_cast<std::ptrdiff_t>(prev), align.end());
    text = std::move(out);
    align = std::move(out_align);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }
  // The prefix takes the alignment of the character it precedes (tokenizers' NormalizedString::prepend).
  void normalize(std::string& text, Align& align) const override {
    if (text.empty()) return;
    text.insert(0, prefix_);
    align.insert(align.begin(), prefix_.size(), align.front());
  }

 private:
  std::string prefix_;
};

// Drops combining marks (general category M), as tokenizers' StripAccents; meant to follow NFD/NFKD.
class StripAccents final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
      const size_t start = i;
      if (!unicode::is_mark(unicode::next_cp(text, i))) out.append(text, start, i - start);
    }
    text = std::move(out);
  }
  void normalize(std::string& text, Align& align) const override {
    std::string out;
    Align out_align;
    size_t i = 0;
    while (i < text.size()) {
      const size_t start = i;
      if (unicode::is_mark(unicode::next_cp(text, i))) continue;
      out.append(text, start, i - start);
      out_align.insert(out_align.end(), align.begin() + static_cast<std::ptrdiff_t>(start),
                       align.begin() + static_cast<std::ptrdiff_t>(i));
    }
    text = std::move(out);
    align = std::move(out_align);
  }
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> items) : items_(std::move(items)) {}
  void normalize(std::string& text) const override {
    for (const auto& n : items_) n->normalize(text);
  }
  void normalize(std::string& text, Align& align) const override {
    for (const auto& n : items_) n->normalize(text, align);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

}  // namespace

Pattern parse_pattern(const json& obj, const char* key, const JsonCtx& ctx) {
  const json& p = require(obj, key, ctx);
  const JsonCtx pc = ctx.at(key);
  if (!p.is_object() || p.size() != 1) pc.fail("expected {\"String\": ...} or {\"Regex\": ...}");
  if (p.contains("String")) return Pattern::literal(get_string(p, "String", pc));
  if (p.contains("Regex")) {
    const std::string re = get_string(p, "Regex", pc);
    try {
      return Pattern::regex(re);
    } catch (const RegexError& e) {
      pc.at("Regex").fail(e.what());
    }
  }
  pc.fail("expected {\"String\": ...} or {\"Regex\": ...}, found key \"" + p.begin().key() + "\"");
}

std::unique_ptr<Normalizer> parse_normalizer(const json& j, const JsonCtx& ctx) {
  if (j.is_null()) return nullptr;
  const std::string type = get_type(j, ctx);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::NormForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::NormForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::NormForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::NormForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip") {
    return std::make_unique<Strip>(get_bool(j, "strip_left", true, ctx), get_bool(j, "strip_right", true, ctx));
  }
  if (type == "Replace")
    return std::make_unique<Replace>(parse_pattern(j, "pattern", ctx), get_string(j, "content", ctx));
  if (type == "Prepend") return std::make_unique<Prepend>(get_string(j, "prepend", ctx));
  if (type == "Sequence") {
    const json& items = require(j, "normalizers", ctx);
    if (!items.is_array()) ctx.at("normalizers").fail("expected an array, found " + json_type_name(items));
    std::vector<std::unique_ptr<Normalizer>> out;
    for (size_t i = 0; i < items.size(); ++i) {
      auto n = parse_normalizer(items[i], ctx.at("normalizers").at(i));
      if (n) out.push_back(std::move(n));
    }
    return std::make_unique<Sequence>(std::move(out));
  }
  unsupported_component("normalizer", type, ctx,
                        "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Sequence");
}

}  // namespace ft::tok

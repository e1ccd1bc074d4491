#include "tokenizer/decoders.h"

#include "tokenizer/normalizers.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace ft::tok {

namespace {

class ByteLevelDec final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      // A token that is not entirely byte-level characters (an added token like "<|eot_id|>" is, "你好" is not)
      // contributes its own UTF-8.
      const size_t mark = bytes.size();
      bool ok = true;
      size_t i = 0;
      while (i < t.size()) {
        const int b = unicode::byte_level_byte(unicode::next_cp(t, i));
        if (b < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!ok) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, unicode::utf8_lossy(bytes));
  }
};

class MetaspaceDec final : public Decoder {
 public:
  MetaspaceDec(char32_t replacement, bool strip_first) : replacement_(replacement), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      const std::string& t = tokens[k];
      std::string out;
      out.reserve(t.size());
      size_t i = 0;
      while (i < t.size()) {
        const size_t start = i;
        const char32_t c = unicode::next_cp(t, i);
        if (c == replacement_) {
          // tokenizers drops every replacement character of the first token when a prefix was prepended.
          if (!(k == 0 && strip_first_)) out.push_back(' ');
        } else {
          out.append(t, start, i - start);
        }
      }
      tokens[k] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool strip_first_;
};

class ByteFallbackDec final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (!unicode::find_invalid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = parse_hex(t[3], t[4]);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }

 private:
  static int parse_hex(char a, char b) {
    auto v = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = v(a), lo = v(b);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDec final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.clear();
    tokens.push_back(std::move(all));
  }
};

class StripDec final : public Decoder {
 public:
  StripDec(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
      size_t i = 0;
      while (i < t.size()) {
        const size_t at = i;
        chars.emplace_back(at, unicode::next_cp(t, i));
      }
      size_t start_cut = 0;
      for (size_t k = 0; k < start_ && k < chars.size() && chars[k].second == content_; ++k) start_cut = k + 1;
      size_t stop_cut = chars.size();
      for (size_t k = 0; k < stop_ && k < chars.size(); ++k) {
        const size_t idx = chars.size() - k - 1;
        if (chars[idx].second != content_) break;
        stop_cut = idx;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      const size_t b = start_cut < chars.size() ? chars[start_cut].first : t.size();
      const size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDec final : public Decoder {
 public:
  ReplaceDec(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class SequenceDec final : public Decoder {
 public:
  explicit SequenceDec(std::vector<std::unique_ptr<Decoder>> items) : items_(std::move(items)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const json& j, const JsonCtx& ctx) {
  if (j.is_null()) return nullptr;
  const std::string type = get_type(j, ctx);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (type == "Metaspace") {
    bool strip_first = true;
    if (auto s = get_opt_string(j, "prepend_scheme", ctx)) {
      if (*s != "always" && *s != "first" && *s != "never") {
        ctx.at("prepend_scheme").fail("unknown prepend_scheme \"" + *s + "\" (expected always, first or never)");
      }
      strip_first = *s != "never";
    } else {
      strip_first = get_bool(j, "add_prefix_space", true, ctx);
    }
    return std::make_unique<MetaspaceDec>(get_char(j, "replacement", ctx), strip_first);
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (type == "Fuse") return std::make_unique<FuseDec>();
  if (type == "Strip") {
    const int64_t start = get_int(j, "start", ctx), stop = get_int(j, "stop", ctx);
    if (start < 0) ctx.at("start").fail("must not be negative");
    if (stop < 0) ctx.at("stop").fail("must not be negative");
    return std::make_unique<StripDec>(get_char(j, "content", ctx), static_cast<size_t>(start),
                                      static_cast<size_t>(stop));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDec>(parse_pattern(j, "pattern", ctx), get_string(j, "content", ctx));
  }
  if (type == "Sequence") {
    const json& items = require(j, "decoders", ctx);
    if (!items.is_array()) ctx.at("decoders").fail("expected an array, found " + json_type_name(items));
    std::vector<std::unique_ptr<Decoder>> out;
    for (size_t i = 0; i < items.size(); ++i) {
      auto d = parse_decoder(items[i], ctx.at("decoders").at(i));
      if (d) out.push_back(std::move(d));
    }
    return std::make_unique<SequenceDec>(std::move(out));
  }
  unsupported_component("decoder", type, ctx, "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence");
}

}  // namespace ft::tok

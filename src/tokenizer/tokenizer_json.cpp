// Hugging Face tokenizer.json: added tokens -> normalizer -> pre-tokenizer -> BPE model; decoder for decode.
#include <fstream>
#include <unordered_set>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoders.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/text_tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace ft::tok {

namespace {

const char* const kHint =
    "the tokenizer.json is malformed or from an unsupported tokenizers version; re-save it "
    "with a recent `tokenizers` (Tokenizer.from_file(...).save(...))";

std::unique_ptr<BpeModel> parse_bpe(const json& m, const JsonCtx& ctx) {
  if (m.contains("dropout") && !m.at("dropout").is_null()) {
    const json& d = m.at("dropout");
    if (!d.is_number()) ctx.at("dropout").fail("expected a number or null, found " + json_type_name(d));
    if (d.get<double>() != 0.0) {
      ctx.at("dropout").fail("BPE dropout " + d.dump() + " makes encoding random; only null or 0 is supported");
    }
  }
  BpeConfig cfg;
  cfg.unk_token = get_opt_string(m, "unk_token", ctx);
  cfg.continuing_subword_prefix = get_opt_string(m, "continuing_subword_prefix", ctx).value_or("");
  cfg.end_of_word_suffix = get_opt_string(m, "end_of_word_suffix", ctx).value_or("");
  cfg.fuse_unk = get_bool(m, "fuse_unk", false, ctx);
  cfg.byte_fallback = get_bool(m, "byte_fallback", false, ctx);
  cfg.ignore_merges = get_bool(m, "ignore_merges", false, ctx);

  const json& vocab = require(m, "vocab", ctx);
  const JsonCtx vc = ctx.at("vocab");
  if (!vocab.is_object()) vc.fail("expected an object {token: id}, found " + json_type_name(vocab));
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX - 1) {
      vc.at(it.key()).fail("expected a non-negative integer id, found " + it.value().dump());
    }
    max_id = std::max(max_id, it.value().get<int64_t>());
  }
  // Ids index a table: a few holes are tolerated, an id far past the entry count would allocate gigabytes.
  const auto entries = static_cast<int64_t>(vocab.size());
  if (max_id >= 2 * entries + 65536) {
    vc.fail("the largest id " + std::to_string(max_id) + " is far beyond the " + std::to_string(entries) +
            " entries (ids must be nearly dense, 0 to N-1)");
  }
  std::vector<std::string> tokens(static_cast<size_t>(max_id + 1));
  std::vector<bool> present(tokens.size(), false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = static_cast<size_t>(it.value().get<int64_t>());
    if (present[id]) {
      vc.at(it.key()).fail("duplicate id " + std::to_string(id) + " (also used by \"" + tokens[id] + "\")");
    }
    present[id] = true;
    tokens[id] = it.key();
  }
  auto model = std::make_unique<BpeModel>(std::move(tokens), std::move(present), cfg);

  const json& merges = require(m, "merges", ctx);
  const JsonCtx mc = ctx.at("merges");
  if (!merges.is_array()) mc.fail("expected an array, found " + json_type_name(merges));
  std::string missing;
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        mc.at(i).fail("expected \"left right\" (two tokens separated by one space), found \"" + s + "\"");
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      mc.at(i).fail("expected \"left right\" or [\"left\", \"right\"], found " + e.dump());
    }
    if (!model->add_merge(a, b, static_cast<int32_t>(i), &missing)) {
      mc.at(i).fail("merge of \"" + a + "\" and \"" + b + "\" names token \"" + missing +
                    "\" which is not in model.vocab");
    }
  }
  return model;
}

class JsonTokenizer final : public TextTokenizer {
 public:
  explicit JsonTokenizer(const std::filesystem::path& file) : file_(file) {
    raw_ = read_file_bytes(file);
    json j;
    try {
      j = json::parse(raw_);
    } catch (const json::parse_error& e) {
      throw ft::ConfigError(file.string() + ": not valid JSON (byte " + std::to_string(e.byte) + "): " + e.what(),
                            "the file is truncated or corrupt; download it again");
    } catch (const json::exception& e) {  // e.g. a number too large for a double (out_of_range 406)
      throw ft::ConfigError(file.string() + ": not valid JSON: " + e.what(),
                            "the file is truncated or corrupt; download it again");
    }
    JsonCtx root{file.string(), "", kHint};
    if (!j.is_object()) root.fail("expected a JSON object at the top level, found " + json_type_name(j));

    const json& m = require(j, "model", root);
    const JsonCtx mc = root.at("model");
    if (!m.is_object()) mc.fail("expected an object, found " + json_type_name(m));
    std::string type;
    if (m.contains("type")) {
      type = get_type(m, mc);
    } else if (m.contains("merges")) {
      type = "BPE";  // files from tokenizers < 0.10 carry no model type
    } else {
      mc.fail("missing \"type\" and no \"merges\": cannot tell the model type");
    }
    if (type != "BPE") unsupported_component("model", type, mc, "BPE");
    model_ = parse_bpe(m, mc);

    normalizer_ = parse_normalizer(j.value("normalizer", json()), root.at("normalizer"));
    pre_tokenizer_ = parse_pre_tokenizer(j.value("pre_tokenizer", json()), root.at("pre_tokenizer"));
    post_ = parse_post_processor(j.value("post_processor", json()), root.at("post_processor"));
    decoder_ = parse_decoder(j.value("decoder", json()), root.at("decoder"));

    vocab_size_ = model_->size();
    const json added = j.value("added_tokens", json::array());
    const JsonCtx ac = root.at("added_tokens");
    if (!added.is_array()) ac.fail("expected an array, found " + json_type_name(added));
    std::unordered_set<int32_t> seen;
    for (size_t i = 0; i < added.size(); ++i) {
      const JsonCtx tc = ac.at(i);
      AddedToken t;
      t.content = get_string(added[i], "content", tc);
      const int64_t id = get_int(added[i], "id", tc);
      if (id < 0 || id > INT32_MAX - 1) tc.at("id").fail("expected a non-negative id, found " + std::to_string(id));
      t.id = static_cast<int32_t>(id);
      t.special = get_bool(added[i], "special", false, tc);
      t.lstrip = get_bool(added[i], "lstrip", false, tc);
      t.rstrip = get_bool(added[i], "rstrip", false, tc);
      t.single_word = get_bool(added[i], "single_word", false, tc);
      t.normalized = get_bool(added[i], "normalized", !t.special, tc);
      if (t.content.empty()) tc.at("content").fail("empty added token");
      if (auto vid = model_->token_to_id(t.content)) {
        // tokenizers keeps the vocabulary's id for an added token that is also a vocab entry.
        t.id = *vid;
      } else if (const std::string* other = model_->id_to_token(t.id)) {
        tc.at("id").fail("duplicate id " + std::to_string(t.id) + ": already model.vocab's \"" + *other + "\"");
      }
      if (!seen.insert(t.id).second) {
        tc.at("id").fail("duplicate id " + std::to_string(t.id) + " (another added token has it)");
      }
      if (added_.find_content(t.content) != nullptr) {
        tc.at("content").fail("duplicate added token \"" + t.content + "\"");
      }
      added_.add(t);
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{t.id} + 1);
    }
    added_.rebuild(normalizer_.get());
  }

  std::string kind() const override { return "tokenizer.json"; }
  const std::filesystem::path& file() const override { return file_; }

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts) const override {
    std::vector<int32_t> ids;
    encode_impl(text, opts, ids, nullptr);
    return ids;
  }

  Encoding encode_with_offsets(std::string_view text, const EncodeOptions& opts) const override {
    Encoding e;
    encode_impl(text, opts, e.ids, &e.offsets);
    return e;
  }

  std::vector<int32_t> prefix_tokens() const override { return post_.prefix; }
  std::vector<int32_t> suffix_tokens() const override { return post_.suffix; }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      if (const AddedToken* t = added_.find_id(id)) {
        if (!(skip_special_tokens && t->special)) tokens.push_back(t->display);
      } else if (const std::string* s = model_->id_to_token(id)) {
        // A vocab token whose string is also a special added token is skipped too (tokenizers checks by string).
        const AddedToken* same = skip_special_tokens ? added_.find_content(*s) : nullptr;
        if (same == nullptr || !same->special) tokens.push_back(*s);
      }
    }
    if (!decoder_) {
      std::string out;
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) out.push_back(' ');
        out += tokens[i];
      }
      return out;
    }
    decoder_->decode_chain(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  }

  int64_t vocab_size() const override { return vocab_size_; }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (const AddedToken* t = added_.find_content(token)) return t->id;
    return model_->token_to_id(token);
  }

  std::optional<std::string> id_to_token(int32_t id) const override {
    if (const AddedToken* t = added_.find_id(id)) return t->display;
    if (const std::string* s = model_->id_to_token(id)) return *s;
    return std::nullopt;
  }

  bool is_special(int32_t id) const override {
    const AddedToken* t = added_.find_id(id);
    return t != nullptr && t->special;
  }

  std::vector<int32_t> add_tokens(const std::vector<std::string>& tokens, bool special) override {
    std::vector<int32_t> ids;
    for (const auto& content : tokens) {
      if (content.empty()) {
        throw ft::ConfigError("tokenizer.add_tokens: empty token", "remove the empty string from the list");
      }
      unicode::check_utf8(content, "added token");
      if (const AddedToken* t = added_.find_content(content)) {
        ids.push_back(t->id);
        continue;
      }
      AddedToken t;
      t.content = content;
      t.special = special;
      t.normalized = !special;
      if (auto vid = model_->token_to_id(content)) {
        t.id = *vid;
      } else {
        t.id = static_cast<int32_t>(vocab_size_);
        ++vocab_size_;
      }
      added_.add(t);
      appended_.push_back(t);
      ids.push_back(t.id);
    }
    added_.rebuild(normalizer_.get());
    return ids;
  }

  void save(const std::filesystem::path& dir) const override {
    json j = json::parse(raw_);
    if (!j.contains("added_tokens") || !j["added_tokens"].is_array()) j["added_tokens"] = json::array();
    for (const auto& t : appended_) {
      j["added_tokens"].push_back({{"id", t.id},
                                   {"content", t.content},
                                   {"single_word", t.single_word},
                                   {"lstrip", t.lstrip},
                                   {"rstrip", t.rstrip},
                                   {"normalized", t.normalized},
                                   {"special", t.special}});
    }
    std::filesystem::create_directories(dir);
    const auto out_path = dir / file_.filename();
    std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
    out << j.dump(2, ' ', false);
    if (!out) throw ft::Error(out_path.string() + ": cannot write tokenizer", "check free disk space and permissions");
  }

 private:
  using Offsets = std::vector<std::pair<size_t, size_t>>;

  // The one encode pipeline; offsets (and the alignments behind them) are only computed when asked for.
  void encode_impl(std::string_view text, const EncodeOptions& opts, std::vector<int32_t>& ids,
                   Offsets* offsets) const {
    unicode::check_utf8(text, "text to encode");
    Pieces pieces;
    added_.extract_and_normalize(text, normalizer_.get(), opts.split_special, pieces, offsets != nullptr);
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
    ids.reserve(text.size() / 3 + 4);
    std::vector<uint32_t> lens;
    for (const auto& p : pieces) {
      if (p.id >= 0) {
        ids.push_back(p.id);
        if (offsets != nullptr) {
          offsets->emplace_back(p.align.front().first, p.align.back().second);
          if (post_.trim_offsets) trim_offsets(p.text, offsets->size() == 1, text, offsets->back());
        }
      } else if (offsets == nullptr) {
        model_->tokenize(p.text, ids);
      } else {
        lens.clear();
        model_->tokenize(p.text, ids, &lens);
        // A token's range runs from its first byte's alignment to its last byte's (tokenizers' convert_offsets).
        size_t pos = 0, k = 0;
        for (uint32_t n : lens) {
          const size_t last = std::min(pos + n, p.align.size()) - 1;
          offsets->emplace_back(p.align[std::min(pos, last)].first, p.align[last].second);
          pos += n;
          if (post_.trim_offsets) {
            const std::string* token = model_->id_to_token(ids[ids.size() - lens.size() + k]);
            trim_offsets(token != nullptr ? *token : std::string_view(), offsets->size() == 1, text, offsets->back());
          }
          ++k;
        }
      }
    }
  }

  // tokenizers' byte_level::process_offsets, quirks included. It runs after the offsets became character
  // offsets, so its counts (characters of the token string; a byte-level "Ġ" is one) move by characters of
  // `text`. An added token's string is the text it matched (stripped whitespace included); a piece that got a
  // prefix space is trimmed unless it is first.
  void trim_offsets(std::string_view token, bool first_token, std::string_view text,
                    std::pair<size_t, size_t>& off) const {
    constexpr char32_t kSpaceChar = 0x120;  // byte-level "Ġ"
    auto is_space = [](char32_t c) { return c == kSpaceChar || unicode::is_whitespace(c); };
    std::vector<char32_t> cps;
    for (size_t k = 0; k < token.size();) cps.push_back(unicode::next_cp(token, k));
    size_t lead = 0, trail = 0;
    while (lead < cps.size() && is_space(cps[lead])) ++lead;
    while (trail < cps.size() && is_space(cps[cps.size() - 1 - trail])) ++trail;
    auto& [b, e] = off;
    auto is_cont = [&](size_t i) { return (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80; };
    if (lead > 0 && !((first_token || b == 0) && post_.trim_add_prefix_space && lead == 1)) {
      for (size_t n = 0; n < lead && b < e; ++n) {
        ++b;
        while (b < e && is_cont(b)) ++b;
      }
    }
    if (trail > 0) {
      size_t pos = e, n = 0;
      for (; n < trail && pos > 0; ++n) {
        --pos;
        while (pos > 0 && is_cont(pos)) --pos;
      }
      if (n == trail) e = std::max(pos, b);
    }
  }

  std::filesystem::path file_;
  std::string raw_;  // the file as read: save() appends to it rather than re-serializing our own model
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  PostProcessor post_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocabulary added_;
  std::vector<AddedToken> appended_;
  int64_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<TextTokenizer> load_tokenizer_json(const std::filesystem::path& file) {
  return std::make_unique<JsonTokenizer>(file);
}

}  // namespace ft::tok

#include "tokenizer/tiktoken.h"

#include <algorithm>
#include <fstream>
#include <unordered_set>

#include "tokenizer/json_util.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace ft::tok {

RankedBpeTokenizer::RankedBpeTokenizer(RankedBpeSetup setup)
    : kind_(std::move(setup.kind)),
      file_(std::move(setup.file)),
      regex_(setup.pattern),
      id_offset_(setup.id_offset),
      match_specials_(setup.match_specials),
      decode_runs_separately_(setup.decode_runs_separately),
      prefix_(std::move(setup.prefix)),
      suffix_(std::move(setup.suffix)) {
  BpeConfig cfg;
  cfg.byte_symbols = true;
  cfg.ignore_merges = true;  // tiktoken returns a piece that is itself a token without merging
  const int64_t n = static_cast<int64_t>(setup.ranks.size());
  model_ = std::make_unique<BpeModel>(std::move(setup.ranks), std::move(setup.present), cfg);
  model_->derive_merges_from_ranks();
  vocab_size_ = n + id_offset_;
  for (const auto& s : setup.specials) {
    specials_.add(s);
    vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{s.id} + 1);
  }
  specials_.rebuild(nullptr);
}

namespace {

bool is_continuation(std::string_view text, size_t i) {
  return (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
}

}  // namespace

void RankedBpeTokenizer::encode_ordinary(std::string_view text, size_t begin, size_t end, std::vector<int32_t>& ids,
                                         Offsets* offsets) const {
  const std::string_view piece = text.substr(begin, end - begin);
  std::vector<std::pair<size_t, size_t>> matches;
  regex_.find_all(piece, matches);
  const size_t first = ids.size();
  std::vector<uint32_t> lens;
  for (const auto& [b, e] : matches) {
    if (offsets == nullptr) {
      model_->tokenize(piece.substr(b, e - b), ids);
      continue;
    }
    lens.clear();
    model_->tokenize(piece.substr(b, e - b), ids, &lens);
    // Byte tokens are widened to the characters they touch, so pieces of one character share its range.
    size_t pos = begin + b;
    for (uint32_t n : lens) {
      size_t tb = pos, te = pos + n;
      while (tb > 0 && is_continuation(text, tb)) --tb;
      while (te < text.size() && is_continuation(text, te)) ++te;
      offsets->emplace_back(tb, te);
      pos += n;
    }
  }
  if (id_offset_ != 0) {
    for (size_t i = first; i < ids.size(); ++i) ids[i] += id_offset_;
  }
}

std::vector<int32_t> RankedBpeTokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::vector<int32_t> ids;
  encode_impl(text, opts, ids, nullptr);
  return ids;
}

Encoding RankedBpeTokenizer::encode_with_offsets(std::string_view text, const EncodeOptions& opts) const {
  Encoding e;
  encode_impl(text, opts, e.ids, &e.offsets);
  return e;
}

void RankedBpeTokenizer::encode_impl(std::string_view text, const EncodeOptions& opts, std::vector<int32_t>& ids,
                                     Offsets* offsets) const {
  unicode::check_utf8(text, "text to encode");
  ids.reserve(text.size() / 3 + 4);
  // Added-token pieces carry their alignment (identity here: no normalizer), which locates them in `text`.
  const bool track = offsets != nullptr;
  auto range = [](const Piece& p) { return std::make_pair(p.align.front().first, p.align.back().second); };
  Pieces pieces;
  added_.extract_and_normalize(text, nullptr, opts.split_special, pieces, track);
  for (auto& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
      if (track) offsets->push_back(range(p));
      continue;
    }
    const size_t base = track ? p.align.front().first : 0;
    if (!match_specials_) {
      if (track) {
        encode_ordinary(text, base, base + p.text.size(), ids, offsets);
      } else {
        encode_ordinary(p.text, 0, p.text.size(), ids, nullptr);
      }
      continue;
    }
    Pieces sub;
    specials_.extract_and_normalize(p.text, nullptr, opts.split_special, sub, track, base);
    for (const auto& s : sub) {
      if (s.id >= 0) {
        ids.push_back(s.id);
        if (track) offsets->push_back(range(s));
      } else if (track) {
        const size_t sb = s.align.front().first;
        encode_ordinary(text, sb, sb + s.text.size(), ids, offsets);
      } else {
        encode_ordinary(s.text, 0, s.text.size(), ids, nullptr);
      }
    }
  }
}

std::string RankedBpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string out, bytes;
  for (int32_t id : ids) {
    const AddedToken* t = specials_.find_id(id);
    if (t == nullptr) t = added_.find_id(id);
    if (t != nullptr) {
      if (skip_special_tokens && t->special) continue;
      if (decode_runs_separately_) {
        out += unicode::utf8_lossy(bytes);
        bytes.clear();
        out += t->content;
      } else {
        bytes += t->content;
      }
    } else if (const std::string* s = model_->id_to_token(id - id_offset_)) {
      bytes += *s;
    }
  }
  out += unicode::utf8_lossy(bytes);
  return out;
}

std::optional<int32_t> RankedBpeTokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* t = specials_.find_content(token)) return t->id;
  if (const AddedToken* t = added_.find_content(token)) return t->id;
  std::string bytes;
  size_t i = 0;
  while (i < token.size()) {
    const int b = unicode::byte_level_byte(unicode::next_cp(token, i));
    if (b < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(b));
  }
  if (auto id = model_->token_to_id(bytes)) return *id + id_offset_;
  return std::nullopt;
}

std::optional<std::string> RankedBpeTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* t = specials_.find_id(id)) return t->content;
  if (const AddedToken* t = added_.find_id(id)) return t->content;
  if (const std::string* s = model_->id_to_token(id - id_offset_)) return unicode::bytes_to_byte_level(*s);
  return std::nullopt;
}

bool RankedBpeTokenizer::is_special(int32_t id) const {
  if (specials_.find_id(id) != nullptr) return true;
  const AddedToken* t = added_.find_id(id);
  return t != nullptr && t->special;
}

std::vector<int32_t> RankedBpeTokenizer::add_tokens(const std::vector<std::string>& tokens, bool special) {
  std::vector<int32_t> ids;
  for (const auto& content : tokens) {
    if (content.empty()) throw ft::ConfigError("tokenizer.add_tokens: empty token", "remove the empty string");
    unicode::check_utf8(content, "added token");
    if (auto id = token_to_id(content)) {
      ids.push_back(*id);
      continue;
    }
    const AddedToken t = verbatim_token(content, static_cast<int32_t>(vocab_size_++), special);
    added_.add(t);
    ++num_added_;
    ids.push_back(t.id);
  }
  added_.rebuild(nullptr);
  return ids;
}

void RankedBpeTokenizer::save(const std::filesystem::path& dir) const {
  if (num_added_ > 0) {
    throw ft::ConfigError(
        file_.string() + ": cannot save " + std::to_string(num_added_) + " added token(s) in a " + kind_ + " file",
        "the " + kind_ + " format has no place for added tokens; use a tokenizer.json instead");
  }
  std::filesystem::create_directories(dir);
  const auto out = dir / file_.filename();
  std::error_code ec;
  if (std::filesystem::exists(out) && std::filesystem::equivalent(out, file_, ec)) return;
  std::filesystem::copy_file(file_, out, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) throw ft::Error(out.string() + ": cannot write tokenizer: " + ec.message(), "check disk space/permissions");
}

TiktokenSpec llama3_tiktoken_spec(int32_t num_base_tokens) {
  // Meta's llama_models/llama3/tokenizer.py, in its order.
  std::vector<std::string> names = {"<|begin_of_text|>",
                                    "<|end_of_text|>",
                                    "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>",
                                    "<|finetune_right_pad_id|>",
                                    "<|step_id|>",
                                    "<|start_header_id|>",
                                    "<|end_header_id|>",
                                    "<|eom_id|>",
                                    "<|eot_id|>",
                                    "<|python_tag|>",
                                    "<|image|>"};
  constexpr int kReserved = 256;
  const int fixed = static_cast<int>(names.size());
  for (int i = 0; i < kReserved - fixed; ++i)
    names.push_back("<|reserved_special_token_" + std::to_string(2 + i) + "|>");
  TiktokenSpec spec;
  spec.pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  for (int i = 0; i < kReserved; ++i) spec.specials.emplace_back(names[static_cast<size_t>(i)], num_base_tokens + i);
  spec.prefix = {num_base_tokens};  // <|begin_of_text|>
  return spec;
}

namespace {

// One "<base64 token bytes> <rank>" line of a tiktoken file; `where` names the line in errors.
std::pair<std::string, int64_t> parse_rank_line(std::string_view line, int64_t max_rank, const std::string& where,
                                                const std::string& hint) {
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos) throw ft::ConfigError(where + ": expected \"<base64> <rank>\"", hint);
  auto bytes = unicode::base64_decode(line.substr(0, sp));
  if (!bytes || bytes->empty())
    throw ft::ConfigError(where + ": invalid base64 token \"" + std::string(line.substr(0, sp)) + "\"", hint);
  const std::string_view rank_text = line.substr(sp + 1);
  int64_t rank = 0;
  if (rank_text.empty() || rank_text.size() > 9)
    throw ft::ConfigError(where + ": invalid rank \"" + std::string(rank_text) + "\"", hint);
  for (char c : rank_text) {
    if (c < '0' || c > '9') throw ft::ConfigError(where + ": invalid rank \"" + std::string(rank_text) + "\"", hint);
    rank = rank * 10 + (c - '0');
  }
  if (rank >= max_rank) {
    throw ft::ConfigError(where + ": rank " + std::to_string(rank) + " is far beyond the file's token count", hint);
  }
  return {std::move(*bytes), rank};
}

// The ranks of a tiktoken file into setup.ranks and setup.present: each rank and each token at most once.
void read_ranks(const std::string& text, const std::filesystem::path& file, const std::string& hint,
                RankedBpeSetup& setup) {
  size_t pos = 0, line_no = 0;
  // Ranks index a table: one far beyond the file's token count (e.g. 999999999) would size it at gigabytes.
  const int64_t max_rank = 2 * static_cast<int64_t>(std::count(text.begin(), text.end(), '\n') + 1) + 65536;
  std::unordered_set<std::string> seen;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = file.string() + ": line " + std::to_string(line_no);
    auto [bytes, rank] = parse_rank_line(line, max_rank, where, hint);
    const auto r = static_cast<size_t>(rank);
    if (r >= setup.ranks.size()) {
      setup.ranks.resize(r + 1);
      setup.present.resize(r + 1, false);
    }
    if (setup.present[r]) throw ft::ConfigError(where + ": duplicate rank " + std::to_string(rank), hint);
    if (!seen.insert(bytes).second)
      throw ft::ConfigError(where + ": duplicate token (rank " + std::to_string(rank) + ")", hint);
    setup.present[r] = true;
    setup.ranks[r] = std::move(bytes);
  }
  if (setup.ranks.empty()) throw ft::ConfigError(file.string() + ": empty tiktoken file", hint);
  for (int b = 0; b < 256; ++b) {
    if (seen.count(std::string(1, static_cast<char>(b))) == 0) {
      throw ft::ConfigError(
          file.string() + ": no token for single byte " + std::to_string(b) + " (byte-level BPE needs all 256)", hint);
    }
  }
}

// The spec's special tokens into setup.specials; their ids must lie outside the file's ranks.
void add_specials(const TiktokenSpec& spec, const std::filesystem::path& file, RankedBpeSetup& setup) {
  for (const auto& [content, id] : spec.specials) {
    if (id >= 0 && static_cast<size_t>(id) < setup.ranks.size() && setup.present[static_cast<size_t>(id)]) {
      throw ft::ConfigError(file.string() + ": special token " + content + " has id " + std::to_string(id) +
                                " which is also a rank in the file",
                            "the special token ids must follow the ranks");
    }
    setup.specials.push_back(verbatim_token(content, id, /*special=*/true));
  }
}

}  // namespace

std::unique_ptr<TextTokenizer> load_tiktoken(const std::filesystem::path& file, const TiktokenSpec& spec) {
  const std::string text = read_file_bytes(file);
  const std::string hint =
      "a tiktoken BPE file has one \"<base64 token bytes> <rank>\" line per token; the file "
      "is truncated or not a tiktoken file";
  RankedBpeSetup setup;
  setup.kind = "tiktoken";
  setup.file = file;
  setup.pattern = spec.pattern;
  read_ranks(text, file, hint, setup);
  add_specials(spec, file, setup);
  setup.prefix = spec.prefix;
  setup.suffix = spec.suffix;
  try {
    return std::make_unique<RankedBpeTokenizer>(std::move(setup));
  } catch (const RegexError& e) {
    throw ft::ConfigError(file.string() + ": " + e.what(), "fix the tiktoken split pattern");
  }
}

}  // namespace ft::tok

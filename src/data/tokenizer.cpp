#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "data/json_records.h"
#include "data/util.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/text_tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::data {
namespace {

std::optional<nlohmann::json> read_json_if_present(const std::filesystem::path& path) {
  if (path.empty() || !std::filesystem::exists(path)) return std::nullopt;
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("cannot parse " + path.string() + ": " + e.what(), "fix or remove the file");
  }
}

// A token given as "</s>" or {"content": "</s>", ...}; -1 when absent or not a piece of the model.
int64_t token_field(const nlohmann::json& j, const char* key, const Tokenizer& tok) {
  if (!j.contains(key)) return -1;
  const auto& v = j[key];
  std::string piece;
  if (v.is_string())
    piece = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string())
    piece = v["content"].get<std::string>();
  else
    return -1;
  return tok.piece_to_id(piece);
}

int64_t id_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return -1;
  const auto& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();  // eos lists: the first
  return -1;
}

void collect_json_strings(const nlohmann::json& value, std::vector<std::string>& out) {
  if (value.is_string()) {
    out.push_back(value.get<std::string>());
  } else if (value.is_array()) {
    for (const auto& v : value) collect_json_strings(v, out);
  }
}

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& s) : s_(s) {}
  bool done() const override { return i_ >= s_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return s_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& s_;
  size_t i_ = 0;
};

}  // namespace

Tokenizer::~Tokenizer() = default;

std::filesystem::path Tokenizer::resolve(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) return path;
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tekken.json", "original/tokenizer.model"}) {
    if (fs::exists(path / name)) return path / name;
  }
  throw ConfigError("no tokenizer in " + path.string(),
                    "expected tokenizer.json, tokenizer.model (sentencepiece or tiktoken) or tekken.json there; or "
                    "set tokenizer.path to the file");
}

namespace {

// sentencepiece models are protobufs whose first field (the pieces, tag 1, length-delimited) starts with 0x0a;
// JSON starts with '{' and tiktoken with a base64 letter.
bool is_sentencepiece_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  char first = 0;
  return in.get(first) && first == '\x0a';
}

// Special tokens a tokenizer.json-style file may call its end of text when no config names one.
int64_t guess_eos(const Tokenizer& tok) {
  for (const char* name : {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>", "<|im_end|>"}) {
    const int64_t id = tok.piece_to_id(name);
    if (id >= 0) return id;
  }
  return -1;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::filesystem::path& path, const std::filesystem::path& model_dir) {
  if (!std::filesystem::exists(path)) {
    throw ConfigError("tokenizer not found: " + path.string(),
                      "set tokenizer.path (a file or a model directory), put the tokenizer files in the model "
                      "directory, or train one (finetune tokenizer train / tokenizer.train_vocab_size)");
  }
  const auto file = resolve(path);
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->model_file_ = file;
  if (is_sentencepiece_file(file)) {
    tok->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = tok->sp_->Load(file.string());
    if (!status.ok()) {
      throw ConfigError("cannot load sentencepiece model " + file.string() + ": " + status.ToString(),
                        "the file must be a sentencepiece .model, a tokenizer.json, a tiktoken file or tekken.json");
    }
    tok->sp_pieces_ = tok->sp_vocab_ = tok->sp_->GetPieceSize();
    tok->sp_added_ = std::make_unique<tok::AddedVocabulary>();
    tok->sp_matched_ = std::make_unique<tok::AddedVocabulary>();
    for (int id = 0; id < tok->sp_->GetPieceSize(); ++id) {
      if (!tok->sp_->IsControl(id) || tok->sp_->IdToPiece(id).empty()) continue;
      tok::AddedToken control;
      control.content = tok->sp_->IdToPiece(id);
      control.id = id;
      control.special = true;
      control.normalized = false;
      tok->sp_matched_->add(control);
    }
    tok->bos_ = tok->sp_->bos_id();
    tok->eos_ = tok->sp_->eos_id();
    tok->pad_ = tok->sp_->pad_id();
  } else {
    tok->text_ = tok::load_text_tokenizer(file);
    const auto prefix = tok->text_->prefix_tokens();
    if (!prefix.empty()) tok->bos_ = prefix.front();
    tok->eos_ = guess_eos(*tok);
  }

  // Without a model directory, the configs beside the tokenizer file (as transformers reads a tokenizer directory).
  const auto config_dir = model_dir.empty() ? file.parent_path() : model_dir;
  if (tok->sp_ && !config_dir.empty()) {
    // The tokens transformers adds in front of a sentencepiece model (what an export of tokenizer.add_tokens holds).
    const auto config_file = config_dir / "tokenizer_config.json";
    if (auto cfg = read_json_if_present(config_file);
        cfg && cfg->is_object() && cfg->contains("added_tokens_decoder")) {
      tok->sp_read_added_tokens((*cfg)["added_tokens_decoder"], config_file);
    }
  }
  if (tok->sp_) {
    tok->sp_added_->rebuild(nullptr);
    tok->sp_matched_->rebuild(nullptr);
  }
  if (!config_dir.empty()) {
    // Later files win: config.json and generation_config.json ids, then the token strings of the tokenizer configs.
    for (const char* name : {"config.json", "generation_config.json"}) {
      if (auto cfg = read_json_if_present(config_dir / name)) {
        for (auto [key, dst] :
             {std::pair{"bos_token_id", &tok->bos_}, {"eos_token_id", &tok->eos_}, {"pad_token_id", &tok->pad_}}) {
          const int64_t id = id_field(*cfg, key);
          if (id >= 0 && id < tok->vocab_size()) *dst = id;
        }
      }
    }
    for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
      if (auto cfg = read_json_if_present(config_dir / name)) {
        for (auto [key, dst] :
             {std::pair{"bos_token", &tok->bos_}, {"eos_token", &tok->eos_}, {"pad_token", &tok->pad_}}) {
          const int64_t id = token_field(*cfg, key, *tok);
          if (id >= 0) *dst = id;
        }
      }
    }
  }
  if (tok->eos_ < 0) {
    throw ConfigError("tokenizer " + file.string() + " defines no EOS token",
                      "set eos_token in the model directory's tokenizer_config.json");
  }
  // Padding must not be EOS: models learn to emit EOS, so it must stay a real target.
  if ((tok->pad_ < 0 || tok->pad_ == tok->eos_) && tok->sp_) tok->pad_ = tok->sp_->unk_id();
  if (tok->pad_ < 0 || tok->pad_ == tok->eos_) tok->pad_ = tok->eos_ == 0 ? 1 : 0;
  const auto probe = tok->encode("a");
  tok->dummy_prefix_ = !probe.empty() && tok->id_to_piece(probe[0]).rfind("\xe2\x96\x81", 0) == 0;
  tok->file_fingerprint_ = hash_file(file);
  tok->update_fingerprint();
  return tok;
}

void Tokenizer::update_fingerprint() {
  fingerprint_ = file_fingerprint_;
  for (int64_t id : {bos_, eos_, pad_}) fingerprint_ = hash_bytes(&id, sizeof(id), fingerprint_);
  // Without added tokens the key stays what it always was (existing dataset caches remain valid).
  auto add = [&](const std::string& content, int64_t id) {
    fingerprint_ = hash_bytes(content.data(), content.size(), fingerprint_);
    fingerprint_ = hash_bytes(&id, sizeof(id), fingerprint_);
  };
  if (sp_added_) {
    for (const auto& t : sp_added_->tokens()) add(t.content, t.id);
  }
  for (const auto& t : added_) add(t.content, t.id);
}

void Tokenizer::sp_read_added_tokens(const nlohmann::json& decoder, const std::filesystem::path& file) {
  if (!decoder.is_object()) {
    throw ConfigError(file.string() + ": added_tokens_decoder must be an object of id -> token",
                      "fix the file or remove the key");
  }
  std::vector<std::pair<int64_t, nlohmann::json>> entries;
  for (const auto& [key, value] : decoder.items()) {
    int64_t id = -1;
    try {
      size_t used = 0;
      id = std::stoll(key, &used);
      if (used != key.size()) id = -1;
    } catch (const std::exception&) {
      id = -1;
    }
    if (id < 0 || !value.is_object() || !value.contains("content") || !value["content"].is_string()) {
      throw ConfigError(file.string() + ": added_tokens_decoder entry \"" + key + "\" is not id: {\"content\": ...}",
                        "fix the file or remove the key");
    }
    entries.emplace_back(id, value);
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [id, value] : entries) {
    if (id < sp_pieces_) continue;  // the model's own pieces (<unk>, <s>, </s> ...)
    const std::string content = value["content"].get<std::string>();
    if (id != sp_vocab_ || content.empty() || sp_added_->find_content(content) != nullptr) {
      throw ConfigError(fmt::format("{}: added_tokens_decoder entry {} (\"{}\") does not extend the {} pieces of {} "
                                    "(ids must follow the vocabulary without gaps, contents must be new)",
                                    file.string(), id, content, sp_vocab_, model_file_.string()),
                        "fix the file or remove the entry");
    }
    const bool special = value.contains("special") && value["special"].is_boolean() && value["special"].get<bool>();
    sp_add(content, id, special);
  }
}

void Tokenizer::sp_add(const std::string& content, int64_t id, bool special) {
  tok::AddedToken t;
  t.content = content;
  t.id = static_cast<int32_t>(id);
  t.special = special;
  t.normalized = false;
  sp_added_->add(t);
  sp_matched_->add(t);
  sp_vocab_ = std::max(sp_vocab_, id + 1);
}

std::vector<Tokenizer::AddedId> Tokenizer::add_tokens(const std::vector<std::string>& tokens) {
  std::vector<AddedId> out;
  std::vector<int64_t> created;
  for (const auto& token : tokens) {
    if (token.empty()) throw ConfigError("tokenizer.add_tokens: empty token", "remove the empty string from the list");
    tok::unicode::check_utf8(token, "tokenizer.add_tokens entry");
  }
  if (text_) {
    const std::string kind = text_->kind();
    if (kind == "tiktoken" || kind == "tekken") {
      for (const auto& token : tokens) {
        if (text_->token_to_id(token)) continue;
        throw ConfigError("tokenizer.add_tokens: '" + token + "' is not in the vocabulary of " + model_file_.string() +
                              ", and a " + kind + " file cannot hold new tokens",
                          "use the model's tokenizer.json instead (transformers writes one: AutoTokenizer."
                          "from_pretrained(dir).save_pretrained(dir)), or add only tokens the vocabulary has");
      }
    }
    const int64_t before = text_->vocab_size();
    const auto ids = text_->add_tokens(tokens, /*special=*/true);
    for (int32_t id : ids) {
      const bool is_new = id >= before && std::find(created.begin(), created.end(), id) == created.end();
      if (is_new) created.push_back(id);
      out.push_back({id, is_new});
    }
  } else {
    for (const auto& token : tokens) {
      if (const tok::AddedToken* t = sp_added_->find_content(token)) {
        out.push_back({t->id, false});
        continue;
      }
      int64_t id = piece_to_id(token);
      const bool is_new = id < 0;
      if (is_new) id = sp_vocab_;
      sp_add(token, id, /*special=*/true);
      out.push_back({id, is_new});
    }
    sp_added_->rebuild(nullptr);
    sp_matched_->rebuild(nullptr);
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool listed =
        std::any_of(added_.begin(), added_.end(), [&](const AddedToken& t) { return t.content == tokens[i]; });
    if (!listed) added_.push_back({tokens[i], out[i].id, out[i].created});
  }
  update_fingerprint();
  return out;
}

void Tokenizer::save(const std::filesystem::path& dir) const {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  if (text_ && !added_.empty()) {
    text_->save(dir);  // tokenizer.json: the file with the added tokens appended
    return;
  }
  // Byte for byte as loaded (sentencepiece keeps its added tokens in tokenizer_config.json).
  const auto out = dir / model_file_.filename();
  std::error_code ec;
  if (fs::exists(out) && fs::equivalent(out, model_file_, ec)) return;
  fs::copy_file(model_file_, out, fs::copy_options::overwrite_existing, ec);
  if (ec)
    throw Error(out.string() + ": cannot write the tokenizer: " + ec.message(), "check disk space and permissions");
}

std::vector<int64_t> Tokenizer::sp_encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw Error("sentencepiece encode failed: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool split_special) const {
  if (text_) {
    tok::EncodeOptions opts;
    opts.split_special = split_special;
    const auto ids = text_->encode(text, opts);
    return {ids.begin(), ids.end()};
  }
  if (sp_added_->tokens().empty()) return sp_encode(text);
  tok::Pieces pieces;
  sp_added_->extract_and_normalize(text, nullptr, split_special, pieces);
  std::vector<int64_t> out;
  bool after_added = false;
  for (const auto& piece : pieces) {
    if (piece.id >= 0) {
      out.push_back(piece.id);
    } else {
      const size_t skip = sp_space_after_added(piece.text, after_added);
      const auto ids = sp_encode(std::string_view(piece.text).substr(skip));
      out.insert(out.end(), ids.begin(), ids.end());
    }
    after_added = piece.id >= 0;
  }
  return out;
}

Tokenizer::Encoding Tokenizer::encode_with_offsets(std::string_view text, bool split_special) const {
  Encoding out;
  if (text_) {
    tok::EncodeOptions opts;
    opts.split_special = split_special;
    auto e = text_->encode_with_offsets(text, opts);
    out.ids.assign(e.ids.begin(), e.ids.end());
    out.offsets = std::move(e.offsets);
    return out;
  }
  auto encode_chunk = [&](size_t begin, size_t end) {
    if (begin >= end) return;
    const auto spt = sp_->EncodeAsImmutableProto(text.substr(begin, end - begin));
    for (const auto& piece : spt.pieces()) {
      out.ids.push_back(piece.id());
      out.offsets.emplace_back(begin + piece.begin(), begin + piece.end());
    }
  };
  // Control pieces and added tokens, leftmost-longest; the pieces between them partition the rest of the text.
  tok::Pieces pieces;
  sp_matched_->extract_and_normalize(text, nullptr, split_special, pieces);
  size_t at = 0;
  bool after_added = false;
  for (const auto& piece : pieces) {
    if (piece.id >= 0) {
      out.ids.push_back(piece.id);
      out.offsets.emplace_back(at, at + piece.text.size());
    } else {
      encode_chunk(at + sp_space_after_added(piece.text, after_added), at + piece.text.size());
    }
    after_added = piece.id >= 0 && sp_added_->find_id(piece.id) != nullptr;
    at += piece.text.size();
  }
  return out;
}

size_t Tokenizer::sp_space_after_added(std::string_view chunk, bool after_added) const {
  // transformers' LlamaTokenizer (legacy, tokenizers backend) starts the text after an added token with the word
  // marker, which a space there becomes rather than adding a second one ("<|im_end|> and" -> "▁and").
  return after_added && dummy_prefix_ && chunk.size() > 1 && chunk[0] == ' ' ? 1 : 0;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  const int64_t n = vocab_size();
  for (int64_t id : ids) FT_CHECK(id >= 0 && id < n, fmt::format("token id {} outside the vocabulary [0, {})", id, n));
  if (text_) return text_->decode(std::vector<int32_t>(ids.begin(), ids.end()), skip_special);
  // Runs of the model's pieces are decoded by sentencepiece; added tokens are written as their text in between.
  std::string out;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    const auto status = sp_->Decode(run, &text);
    if (!status.ok()) throw Error("sentencepiece decode failed: " + status.ToString());
    out += text;
    run.clear();
  };
  for (int64_t id : ids) {
    const tok::AddedToken* added = sp_added_->find_id(static_cast<int32_t>(id));
    if (added != nullptr && added->special && skip_special) continue;
    if (id < sp_pieces_) {
      run.push_back(static_cast<int>(id));
      continue;
    }
    flush();
    if (added != nullptr) out += added->content;
  }
  flush();
  return out;
}

int64_t Tokenizer::vocab_size() const {
  return text_ ? text_->vocab_size() : sp_vocab_;
}

int64_t Tokenizer::piece_to_id(std::string_view piece) const {
  if (text_) {
    const auto id = text_->token_to_id(piece);
    return id ? *id : -1;
  }
  if (const tok::AddedToken* added = sp_added_->find_content(piece)) return added->id;
  const int id = sp_->PieceToId(piece);
  // sentencepiece answers unk for unknown pieces; only the unk piece itself maps to unk.
  if (sp_->IsUnknown(id) && sp_->IdToPiece(id) != piece) return -1;
  return id;
}

std::string Tokenizer::id_to_piece(int64_t id) const {
  FT_CHECK(id >= 0 && id < vocab_size(), fmt::format("token id {} outside the vocabulary", id));
  if (text_) return text_->id_to_token(static_cast<int32_t>(id)).value_or(std::string());
  if (id >= sp_pieces_) {
    const tok::AddedToken* added = sp_added_->find_id(static_cast<int32_t>(id));
    return added != nullptr ? added->content : std::string();
  }
  return sp_->IdToPiece(static_cast<int>(id));
}

bool Tokenizer::is_special(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  if (text_) return text_->is_special(static_cast<int32_t>(id));
  if (const tok::AddedToken* added = sp_added_->find_id(static_cast<int32_t>(id))) return added->special;
  return id < sp_pieces_ && (sp_->IsControl(static_cast<int>(id)) || sp_->IsUnknown(static_cast<int>(id)));
}

std::string Tokenizer::kind() const {
  return text_ ? text_->kind() : "sentencepiece";
}

void train_tokenizer(const std::vector<std::filesystem::path>& inputs, int64_t vocab_size,
                     const std::string& model_type, const std::filesystem::path& out_dir,
                     const TokenizerTrainOptions& options) {
  if (model_type != "bpe" && model_type != "unigram") {
    throw ConfigError("unknown tokenizer model type '" + model_type + "'", "use bpe or unigram");
  }
  if (vocab_size < 8) throw ConfigError(fmt::format("tokenizer vocab size {} is too small", vocab_size), "use >= 8");
  if (inputs.empty()) throw ConfigError("no input files to train the tokenizer on", "pass --input FILE");
  std::vector<std::string> sentences;
  const auto& f = options.fields;
  auto collect = [&](const nlohmann::json& j) {
    if (!j.is_object()) return;
    for (const auto* key : {&f.text, &f.prompt, &f.input, &f.completion}) {
      if (j.contains(*key)) collect_json_strings(j[*key], sentences);
    }
    if (j.contains(f.messages) && j[f.messages].is_array()) {
      for (const auto& m : j[f.messages]) {
        if (m.is_object() && m.contains(f.content)) collect_json_strings(m[f.content], sentences);
      }
    }
  };
  for (const auto& path : inputs) {
    if (!std::filesystem::is_regular_file(path)) throw Error("cannot read " + path.string(), "check the --input path");
    const auto ext = path.extension().string();
    if (ext == ".jsonl" || ext == ".json") {
      // The records as the datasets read them: JSON Lines, or one JSON array of objects.
      RecordReader reader(path);
      std::string record;
      int64_t line_no = 0;
      while (reader.next(record, line_no)) {
        try {
          collect(nlohmann::json::parse(record));
        } catch (const nlohmann::json::exception& e) {
          throw Error(fmt::format("{}:{}: invalid JSON: {}", path.string(), line_no, e.what()), "fix the line");
        }
      }
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    for (std::string line; std::getline(in, line);) {
      if (line.find_first_not_of(" \t\r") != std::string::npos) sentences.push_back(line);
    }
  }
  if (sentences.empty()) throw Error("the tokenizer inputs hold no text", "check the files and data.fields");
  std::filesystem::create_directories(out_dir);
  std::string symbols;
  for (const auto& s : options.user_defined_symbols) symbols += (symbols.empty() ? "" : ",") + s;
  std::unordered_map<std::string, std::string> args = {
      {"model_prefix", (out_dir / "tokenizer").string()},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", model_type},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"hard_vocab_limit", "false"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "3"},
      {"num_threads", "1"},
      {"shuffle_input_sentence", "false"},
      {"input_sentence_size", "0"},
      {"minloglevel", "1"},  // warnings and errors only: the INFO log is hundreds of lines
  };
  if (!symbols.empty()) args["user_defined_symbols"] = symbols;
  VectorIterator it(sentences);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it);
  if (!status.ok()) {
    throw Error("sentencepiece training failed: " + status.ToString(),
                "byte fallback needs at least 260 pieces plus one per distinct character; a small corpus needs a "
                "smaller vocabulary for unigram (or use bpe)");
  }
  FT_LOG_INFO("trained a {} tokenizer of {} pieces on {} sentences: {}", model_type, vocab_size, sentences.size(),
              (out_dir / "tokenizer.model").string());
}

}  // namespace ft::data

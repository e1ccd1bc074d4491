#include "tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/added_tokens.h"
#include "tokenizer/text_tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/hash.h"

namespace ft::tok {
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

std::unique_ptr<sentencepiece::SentencePieceProcessor> load_sentencepiece(const std::filesystem::path& file) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(file.string());
  if (!status.ok()) {
    throw ConfigError("cannot load sentencepiece model " + file.string() + ": " + status.ToString(),
                      "the file must be a sentencepiece .model, a tokenizer.json, a tiktoken file or tekken.json");
  }
  return sp;
}

// The control pieces of a sentencepiece model, as the added tokens encode_with_offsets() matches in text.
std::unique_ptr<AddedVocabulary> control_pieces(const sentencepiece::SentencePieceProcessor& sp) {
  auto controls = std::make_unique<tok::AddedVocabulary>();
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    if (!sp.IsControl(id) || sp.IdToPiece(id).empty()) continue;
    controls->add(tok::verbatim_token(sp.IdToPiece(id), id, /*special=*/true));
  }
  return controls;
}

// The special ids `config_dir` declares over those of the tokenizer file. Later files win: config.json and
// generation_config.json ids, then the token strings of the tokenizer configs.
void read_special_ids(const std::filesystem::path& config_dir, const Tokenizer& tok, int64_t& bos, int64_t& eos,
                      int64_t& pad) {
  for (const char* name : {"config.json", "generation_config.json"}) {
    if (auto cfg = read_json_if_present(config_dir / name)) {
      for (auto [key, dst] : {std::pair{"bos_token_id", &bos}, {"eos_token_id", &eos}, {"pad_token_id", &pad}}) {
        const int64_t id = id_field(*cfg, key);
        if (id >= 0 && id < tok.vocab_size()) *dst = id;
      }
    }
  }
  for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
    if (auto cfg = read_json_if_present(config_dir / name)) {
      for (auto [key, dst] : {std::pair{"bos_token", &bos}, {"eos_token", &eos}, {"pad_token", &pad}}) {
        const int64_t id = token_field(*cfg, key, tok);
        if (id >= 0) *dst = id;
      }
    }
  }
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
    tok->sp_ = load_sentencepiece(file);
    tok->sp_pieces_ = tok->sp_vocab_ = tok->sp_->GetPieceSize();
    tok->sp_added_ = std::make_unique<tok::AddedVocabulary>();
    tok->sp_matched_ = control_pieces(*tok->sp_);
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
  if (!config_dir.empty()) read_special_ids(config_dir, *tok, tok->bos_, tok->eos_, tok->pad_);
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
  const tok::AddedToken t = tok::verbatim_token(content, static_cast<int32_t>(id), special);
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

}  // namespace ft::tok

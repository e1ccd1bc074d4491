#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "data/util.h"
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

std::unique_ptr<Tokenizer> Tokenizer::load(const std::filesystem::path& model_file,
                                           const std::filesystem::path& model_dir) {
  if (!std::filesystem::exists(model_file)) {
    throw Error("tokenizer model not found: " + model_file.string(),
                "set tokenizer.path, put tokenizer.model in the model directory, or train one "
                "(finetune tokenizer train / tokenizer.train_vocab_size)");
  }
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = tok->sp_->Load(model_file.string());
  if (!status.ok()) {
    throw Error("cannot load sentencepiece model " + model_file.string() + ": " + status.ToString(),
                "the file must be a sentencepiece .model (Hugging Face tokenizer.json-only models are not supported)");
  }
  tok->model_file_ = model_file;
  tok->bos_ = tok->sp_->bos_id();
  tok->eos_ = tok->sp_->eos_id();
  tok->pad_ = tok->sp_->pad_id();

  if (!model_dir.empty()) {
    // Later files win: config.json ids, then the token strings of the tokenizer configs.
    if (auto cfg = read_json_if_present(model_dir / "config.json")) {
      for (auto [key, dst] :
           {std::pair{"bos_token_id", &tok->bos_}, {"eos_token_id", &tok->eos_}, {"pad_token_id", &tok->pad_}}) {
        const int64_t id = id_field(*cfg, key);
        if (id >= 0 && id < tok->vocab_size()) *dst = id;
      }
    }
    for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
      if (auto cfg = read_json_if_present(model_dir / name)) {
        for (auto [key, dst] :
             {std::pair{"bos_token", &tok->bos_}, {"eos_token", &tok->eos_}, {"pad_token", &tok->pad_}}) {
          const int64_t id = token_field(*cfg, key, *tok);
          if (id >= 0) *dst = id;
        }
      }
    }
  }
  if (tok->eos_ < 0) {
    throw Error("tokenizer " + model_file.string() + " defines no EOS token",
                "set eos_token in tokenizer_config.json or train a model with an eos piece");
  }
  // Padding must not be EOS: models learn to emit EOS, so it must stay a real target.
  if (tok->pad_ < 0 || tok->pad_ == tok->eos_) tok->pad_ = tok->sp_->unk_id();
  if (tok->pad_ < 0 || tok->pad_ == tok->eos_) tok->pad_ = tok->eos_ == 0 ? 1 : 0;
  const auto probe = tok->encode("a");
  tok->dummy_prefix_ = !probe.empty() && tok->id_to_piece(probe[0]).rfind("\xe2\x96\x81", 0) == 0;
  tok->fingerprint_ = hash_file(model_file);
  for (int64_t id : {tok->bos_, tok->eos_, tok->pad_})
    tok->fingerprint_ = hash_bytes(&id, sizeof(id), tok->fingerprint_);
  return tok;
}

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw Error("sentencepiece encode failed: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> v;
  v.reserve(ids.size());
  const int64_t n = vocab_size();
  for (int64_t id : ids) {
    FT_CHECK(id >= 0 && id < n, fmt::format("token id {} outside the vocabulary [0, {})", id, n));
    v.push_back(static_cast<int>(id));
  }
  std::string out;
  const auto status = sp_->Decode(v, &out);
  if (!status.ok()) throw Error("sentencepiece decode failed: " + status.ToString());
  return out;
}

int64_t Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}

int64_t Tokenizer::piece_to_id(std::string_view piece) const {
  const int id = sp_->PieceToId(piece);
  // sentencepiece answers unk for unknown pieces; only the unk piece itself maps to unk.
  if (sp_->IsUnknown(id) && sp_->IdToPiece(id) != piece) return -1;
  return id;
}

std::string Tokenizer::id_to_piece(int64_t id) const {
  FT_CHECK(id >= 0 && id < vocab_size(), fmt::format("token id {} outside the vocabulary", id));
  return sp_->IdToPiece(static_cast<int>(id));
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
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot read " + path.string(), "check the --input path");
    const auto ext = path.extension().string();
    const bool jsonl = ext == ".jsonl" || ext == ".json";
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      if (!jsonl) {
        sentences.push_back(line);
        continue;
      }
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error(fmt::format("{}:{}: invalid JSON: {}", path.string(), line_no, e.what()), "fix the line");
      }
      if (!j.is_object()) continue;
      for (const auto* key : {&f.text, &f.prompt, &f.input, &f.completion}) {
        if (j.contains(*key)) collect_json_strings(j[*key], sentences);
      }
      if (j.contains(f.messages) && j[f.messages].is_array()) {
        for (const auto& m : j[f.messages]) {
          if (m.is_object() && m.contains(f.content)) collect_json_strings(m[f.content], sentences);
        }
      }
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

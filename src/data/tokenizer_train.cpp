// Training a sentencepiece tokenizer on text and JSON Lines files (finetune tokenizer train).
#include <sentencepiece_trainer.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "data/json_records.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::data {
namespace {

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

// The sentences a tokenizer is trained on, from text and JSON Lines files or a run's data sources.
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "data/dataset.h"
#include "data/json_records.h"
#include "data/records.h"
#include "data/records_internal.h"
#include "data/tokenizer_train.h"
#include "tokenizer/sentencepiece_train.h"
#include "tokenizer/unicode.h"
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

// The texts of `path`'s records as the dataset parses them, with its data.on_error rule; the dataset warns about
// skipped lines when it reads the same file next. Returns the first skipped record's error ("" for none).
std::string collect_dataset_records(const std::filesystem::path& path, const RecordOptions& ro, OnError on_error,
                                    std::vector<std::string>& sentences) {
  RecordReader reader(path);
  BadRecords bad(path, on_error);
  std::string record;
  int64_t line_no = 0, records = 0;
  while (reader.next(record, line_no)) {
    ++records;
    try {
      for (const auto& segment : parse_record(record, ro)) {
        if (!segment.text.empty()) sentences.push_back(segment.text);
      }
    } catch (const RecordError& e) {
      bad.add(line_no, e);
    }
  }
  bad.finish(records);
  return bad.first_error();
}

}  // namespace

void train_tokenizer(const std::vector<std::filesystem::path>& inputs, int64_t vocab_size,
                     const std::string& model_type, const std::filesystem::path& out_dir,
                     const TokenizerTrainOptions& options) {
  const std::optional<TokenizerModel> model = parse_setting<TokenizerModel>(model_type);
  if (!model) {
    throw ConfigError("unknown tokenizer model type '" + model_type + "'", "use " + setting_names<TokenizerModel>());
  }
  // Byte fallback (always on, so no text is unknown) takes 256 pieces, and unk, bos, eos and pad 4 more.
  if (vocab_size < 260) {
    throw ConfigError(fmt::format("tokenizer vocab size {} is too small: the 256 byte pieces and the 4 special ids "
                                  "take 260",
                                  vocab_size),
                      "use at least 260 plus one per distinct character of the text (300 suits plain ASCII)");
  }
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
  std::string first_skipped;  // data.on_error=skip: the first bad record, for a corpus left empty
  for (size_t input = 0; input < inputs.size(); ++input) {
    const auto& path = inputs[input];
    if (!std::filesystem::is_regular_file(path)) throw Error("cannot read " + path.string(), "check the --input path");
    const auto ext = path.extension().string();
    if (options.dataset != nullptr) {
      // The dataset's own parsing, rendered with the plain template: the model's template and a built-in's variant
      // for this tokenizer are chosen once the tokenizer exists; only the text matters here.
      RecordOptions ro = options.dataset->record_options(options.dataset->sources.at(input));
      ro.template_name = "plain";
      ro.chat = nullptr;
      const std::string skipped = collect_dataset_records(path, ro, options.dataset->on_error, sentences);
      if (first_skipped.empty()) first_skipped = skipped;
      continue;
    }
    if (ext == ".jsonl" || ext == ".json") {
      // The records as the datasets read them: JSON Lines, or one JSON array of objects.
      RecordReader reader(path);
      std::string record;
      int64_t line_no = 0;
      while (reader.next(record, line_no)) {
        try {
          collect(parse_record_json(record));
        } catch (const RecordError& e) {
          throw Error(fmt::format("{}:{}: {}", path.string(), line_no, e.what()), "fix the line");
        }
      }
      continue;
    }
    // Plain text, a sentence per line: CRLF ends a line as LF does, and invalid UTF-8 is refused as in records.
    std::ifstream in(path, std::ios::binary);
    int64_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (const auto bad = tok::unicode::find_invalid_utf8(line)) {
        throw Error(fmt::format("{}:{}: invalid UTF-8 at byte {}", path.string(), line_no, *bad + 1),
                    "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)");
      }
      if (line.find_first_not_of(" \t") != std::string::npos) sentences.push_back(line);
    }
  }
  if (sentences.empty()) {
    std::vector<std::string> names;
    for (const auto& path : inputs) names.push_back(path.string());
    throw Error(fmt::format("the tokenizer inputs hold no text: {}{}", fmt::join(names, ", "),
                            first_skipped.empty() ? "" : "; every record was skipped as bad, the first: " + first_skipped),
                "check the files and data.fields (the JSON field names whose strings are read)");
  }
  tok::SentencepieceTrainOptions train;
  train.user_defined_symbols = options.user_defined_symbols;
  train.character_coverage = options.character_coverage;
  train.write_vocab = options.write_vocab;
  tok::train_sentencepiece(sentences, vocab_size, *model, out_dir, train);
}

}  // namespace ft::data

// Training a sentencepiece tokenizer on a run's data or on text and JSON Lines files: the sentences come from here,
// the model from tokenizer/sentencepiece_train.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"

namespace ft::data {

struct DatasetOptions;

struct TokenizerTrainOptions {
  DataFields fields;                              // JSON field names whose strings are collected from JSON Lines inputs
  std::vector<std::string> user_defined_symbols;  // pieces kept whole (e.g. chat template markers)
  double character_coverage = 1.0;                // 1.0 keeps every character seen (byte fallback covers the rest)
  // A run's data (tokenizer.train_vocab_size): the inputs are its sources, and their records are read as the
  // dataset reads them (format, data.fields, roles, data.on_error), so a bad line, a missing field or an empty file
  // fails or is skipped with the dataset's own messages. Null (`finetune tokenizer train`): every string under
  // `fields` of a JSON input is a sentence.
  const DatasetOptions* dataset = nullptr;
  bool write_vocab = true;  // also out_dir/tokenizer.vocab (pieces and scores as text)
};

// Trains a sentencepiece model of `vocab_size` pieces ("bpe" or "unigram") on `inputs` and writes
// out_dir/tokenizer.model (and out_dir/tokenizer.vocab with options.write_vocab). With options.dataset the inputs
// are read as that dataset reads them; otherwise files ending in .jsonl/.json are read as JSON Lines and every string
// under the configured text/prompt/input/completion/content fields is a sentence, and any other file is plain text,
// one sentence per line. Single-threaded and unshuffled, so the result is deterministic.
// Ids: unk 0, bos 1, eos 2, pad 3 (Llama layout plus a real pad); digits are split; byte fallback on.
void train_tokenizer(const std::vector<std::filesystem::path>& inputs, int64_t vocab_size,
                     const std::string& model_type, const std::filesystem::path& out_dir,
                     const TokenizerTrainOptions& options = {});

}  // namespace ft::data

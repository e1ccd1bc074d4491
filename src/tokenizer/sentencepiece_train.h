// Training a sentencepiece model (finetune tokenizer train, tokenizer.train_vocab_size): the model layout every
// trained tokenizer shares. data/tokenizer_train.h gathers the sentences from the run's data or the given files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/settings.h"

namespace ft::tok {

struct SentencepieceTrainOptions {
  std::vector<std::string> user_defined_symbols;  // pieces kept whole (e.g. chat template markers)
  double character_coverage = 1.0;                // 1.0 keeps every character seen (byte fallback covers the rest)
  bool write_vocab = true;                        // also out_dir/tokenizer.vocab (pieces and scores as text)
};

// Trains a model of `vocab_size` pieces on `sentences` (not empty) and writes out_dir/tokenizer.model (and
// out_dir/tokenizer.vocab with options.write_vocab). Single-threaded and unshuffled, so the result is
// deterministic. Ids: unk 0, bos 1, eos 2, pad 3 (Llama layout plus a real pad); digits are split; byte fallback on.
void train_sentencepiece(const std::vector<std::string>& sentences, int64_t vocab_size, TokenizerModel model_type,
                         const std::filesystem::path& out_dir, const SentencepieceTrainOptions& options);

}  // namespace ft::tok

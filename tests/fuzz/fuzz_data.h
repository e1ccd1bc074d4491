// A small sentencepiece tokenizer trained once per fuzz process (the C++ trainer, a few sentences), for the
// targets whose parsers need one: records, dataset cache entries, the files beside a tokenizer.
#pragma once

#include <filesystem>

#include "data/tokenizer_train.h"
#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

namespace ft::fuzz {

// <scratch>/spm/tokenizer.model, trained on first use, with the ChatML markers as whole pieces.
inline const std::filesystem::path& small_tokenizer_model() {
  static const std::filesystem::path model = [] {
    const auto dir = scratch() / "spm";
    std::filesystem::create_directories(dir);
    std::string corpus;
    for (int i = 0; i < 30; ++i) {
      corpus += "The quick brown fox " + std::to_string(i) + " jumps over the lazy dog.\n";
      corpus += "Café crème, naïve façade; 日本語のテキスト " + std::to_string(i * 7) + "\n";
      corpus += "User: hello there! Assistant: hi, how can I help?\n";
    }
    write_bytes(dir / "corpus.txt", corpus);
    data::TokenizerTrainOptions options;
    options.user_defined_symbols = {"<|im_start|>", "<|im_end|>"};
    data::train_tokenizer({dir / "corpus.txt"}, 400, "bpe", dir, options);
    return dir / "tokenizer.model";
  }();
  return model;
}

}  // namespace ft::fuzz

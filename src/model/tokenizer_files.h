// The tokenizer files of a saved model or export: those of a model directory copied as they are, and those a run
// writes beside its model (the tokenizer it trained with, its chat template and added tokens) so that
// transformers' AutoTokenizer loads them as the run used them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ft::model {

// Copies tokenizer files (tokenizer.model, tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// generation_config.json, ...) that exist in `from` into `to`; returns the names copied. Throws ft::ConfigError,
// copying nothing, when one of them resolves outside `from`.
std::vector<std::string> copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to);

// The tokenizer files of the model directory (or the trained tokenizer.model), plus tokenizer_config.json with the
// chat template the run trained with and, unless the base model says otherwise, whether a BOS starts each text (as
// tokenizer.add_bos did in training), so the exported model is prompted and chats the way it learned to. The
// tokenizer itself is the one the run used: with tokenizer.add_tokens, tokenizer.json holds the added tokens (a
// sentencepiece model keeps them in tokenizer_config.json).
void write_tokenizer_files(const std::string& base_model_dir, const tok::Tokenizer& tokenizer,
                           const std::string& template_name, bool add_bos, const std::filesystem::path& dir);

}  // namespace ft::model

// tokenizer.json pre-tokenizers: split pieces further (and, for ByteLevel, map bytes to printable characters).
#pragma once

#include <memory>

#include "tokenizer/json_util.h"
#include "tokenizer/piece.h"

namespace ft::tok {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every text piece (id < 0) by its sub-pieces; added-token pieces pass through unchanged. Empty
  // pieces are dropped, as tokenizers' PreTokenizedString::split does.
  virtual void pre_tokenize(Pieces& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& j, const JsonCtx& ctx);

}  // namespace ft::tok

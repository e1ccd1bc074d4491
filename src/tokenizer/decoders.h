// tokenizer.json decoders: turn token strings back into text, as tokenizers' decode_chain then join("").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace ft::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> parse_decoder(const json& j, const JsonCtx& ctx);

}  // namespace ft::tok

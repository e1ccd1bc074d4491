// tokenizer.json normalizers. Each one rewrites a piece's text in place; the second overload also keeps the
// per-byte alignment to the original text (for offsets) the way tokenizers' NormalizedString::transform does. The
// plain overload exists because encode() must not pay for alignments it does not need.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/json_util.h"
#include "tokenizer/piece.h"
#include "tokenizer/regex.h"

namespace ft::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
  virtual void normalize(std::string& text, Align& align) const = 0;
};

// Throws ConfigError naming file and JSON path for an unknown or malformed normalizer. Null JSON gives nullptr.
std::unique_ptr<Normalizer> parse_normalizer(const json& j, const JsonCtx& ctx);

// tokenizer.json's pattern objects, {"String": "..."} or {"Regex": "..."} (shared with pre-tokenizers, decoders).
Pattern parse_pattern(const json& obj, const char* key, const JsonCtx& ctx);

}  // namespace ft::tok

// Tokenizer: encoding and decoding, and the vocabulary's ids and pieces.
#include <sentencepiece_processor.h>

#include "tokenizer/added_tokens.h"
#include "tokenizer/text_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::tok {

std::vector<int64_t> Tokenizer::sp_encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw Error("sentencepiece encode failed: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool split_special) const {
  if (text_) {
    tok::EncodeOptions opts;
    opts.split_special = split_special;
    const auto ids = text_->encode(text, opts);
    return {ids.begin(), ids.end()};
  }
  if (sp_added_->tokens().empty()) return sp_encode(text);
  tok::Pieces pieces;
  sp_added_->extract_and_normalize(text, nullptr, split_special, pieces);
  std::vector<int64_t> out;
  bool after_added = false;
  for (const auto& piece : pieces) {
    if (piece.id >= 0) {
      out.push_back(piece.id);
    } else {
      const size_t skip = sp_space_after_added(piece.text, after_added);
      const auto ids = sp_encode(std::string_view(piece.text).substr(skip));
      out.insert(out.end(), ids.begin(), ids.end());
    }
    after_added = piece.id >= 0;
  }
  return out;
}

Tokenizer::Encoding Tokenizer::encode_with_offsets(std::string_view text, bool split_special) const {
  Encoding out;
  if (text_) {
    tok::EncodeOptions opts;
    opts.split_special = split_special;
    auto e = text_->encode_with_offsets(text, opts);
    out.ids.assign(e.ids.begin(), e.ids.end());
    out.offsets = std::move(e.offsets);
    return out;
  }
  auto encode_chunk = [&](size_t begin, size_t end) {
    if (begin >= end) return;
    const auto spt = sp_->EncodeAsImmutableProto(text.substr(begin, end - begin));
    for (const auto& piece : spt.pieces()) {
      out.ids.push_back(piece.id());
      out.offsets.emplace_back(begin + piece.begin(), begin + piece.end());
    }
  };
  // Control pieces and added tokens, leftmost-longest; the pieces between them partition the rest of the text.
  tok::Pieces pieces;
  sp_matched_->extract_and_normalize(text, nullptr, split_special, pieces);
  size_t at = 0;
  bool after_added = false;
  for (const auto& piece : pieces) {
    if (piece.id >= 0) {
      out.ids.push_back(piece.id);
      out.offsets.emplace_back(at, at + piece.text.size());
    } else {
      encode_chunk(at + sp_space_after_added(piece.text, after_added), at + piece.text.size());
    }
    after_added = piece.id >= 0 && sp_added_->find_id(piece.id) != nullptr;
    at += piece.text.size();
  }
  return out;
}

size_t Tokenizer::sp_space_after_added(std::string_view chunk, bool after_added) const {
  // transformers' LlamaTokenizer (legacy, tokenizers backend) starts the text after an added token with the word
  // marker, which a space there becomes rather than adding a second one ("<|im_end|> and" -> "▁and").
  return after_added && dummy_prefix_ && chunk.size() > 1 && chunk[0] == ' ' ? 1 : 0;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  const int64_t n = vocab_size();
  for (int64_t id : ids) FT_CHECK(id >= 0 && id < n, fmt::format("token id {} outside the vocabulary [0, {})", id, n));
  if (text_) return text_->decode(std::vector<int32_t>(ids.begin(), ids.end()), skip_special);
  // Runs of the model's pieces are decoded by sentencepiece; added tokens are written as their text in between.
  std::string out;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    const auto status = sp_->Decode(run, &text);
    if (!status.ok()) throw Error("sentencepiece decode failed: " + status.ToString());
    out += text;
    run.clear();
  };
  for (int64_t id : ids) {
    const tok::AddedToken* added = sp_added_->find_id(static_cast<int32_t>(id));
    if (added != nullptr && added->special && skip_special) continue;
    if (id < sp_pieces_) {
      run.push_back(static_cast<int>(id));
      continue;
    }
    flush();
    if (added != nullptr) out += added->content;
  }
  flush();
  return out;
}

int64_t Tokenizer::vocab_size() const {
  return text_ ? text_->vocab_size() : sp_vocab_;
}

int64_t Tokenizer::piece_to_id(std::string_view piece) const {
  if (text_) {
    const auto id = text_->token_to_id(piece);
    return id ? *id : -1;
  }
  if (const tok::AddedToken* added = sp_added_->find_content(piece)) return added->id;
  const int id = sp_->PieceToId(piece);
  // sentencepiece answers unk for unknown pieces; only the unk piece itself maps to unk.
  if (sp_->IsUnknown(id) && sp_->IdToPiece(id) != piece) return -1;
  return id;
}

std::string Tokenizer::id_to_piece(int64_t id) const {
  FT_CHECK(id >= 0 && id < vocab_size(), fmt::format("token id {} outside the vocabulary", id));
  if (text_) return text_->id_to_token(static_cast<int32_t>(id)).value_or(std::string());
  if (id >= sp_pieces_) {
    const tok::AddedToken* added = sp_added_->find_id(static_cast<int32_t>(id));
    return added != nullptr ? added->content : std::string();
  }
  return sp_->IdToPiece(static_cast<int>(id));
}

bool Tokenizer::is_special(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  if (text_) return text_->is_special(static_cast<int32_t>(id));
  if (const tok::AddedToken* added = sp_added_->find_id(static_cast<int32_t>(id))) return added->special;
  return id < sp_pieces_ && (sp_->IsControl(static_cast<int>(id)) || sp_->IsUnknown(static_cast<int>(id)));
}

std::string Tokenizer::kind() const {
  return text_ ? text_->kind() : "sentencepiece";
}

}  // namespace ft::tok

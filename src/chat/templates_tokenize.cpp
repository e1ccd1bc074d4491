// Rendered segments as a string (segments_to_string) and as token ids with their loss mask (tokenize_segments).
#include <algorithm>
#include <string_view>

#include "chat/templates.h"
#include "tokenizer/tokenizer.h"

namespace ft::chat {
namespace {

using Kind = Segment::Kind;

}  // namespace

std::string segments_to_string(const std::vector<Segment>& segments, const std::string& bos, const std::string& eos) {
  std::string s;
  for (const auto& seg : segments) {
    if (seg.kind == Kind::kBos)
      s += bos;
    else if (seg.kind == Kind::kEos)
      s += eos;
    else
      s += seg.text;
  }
  return s;
}

TokenizedSample tokenize_segments(const tok::Tokenizer& tokenizer, const std::vector<Segment>& segments) {
  TokenizedSample out;
  auto push = [&out](int64_t id, bool loss) {
    out.tokens.push_back(static_cast<int32_t>(id));
    out.loss.push_back(loss ? 1 : 0);
  };
  std::string pending;
  bool pending_loss = false;
  bool first_text = true;
  auto flush = [&] {
    if (pending.empty()) return;
    // Each run is encoded on its own, so sentencepiece adds its word marker again; a run that continues the
    // text and starts with a space lets that marker stand for the space, as encoding the whole string would.
    std::string_view text = pending;
    if (!first_text && tokenizer.adds_dummy_prefix() && text.size() > 1 && text[0] == ' ') text.remove_prefix(1);
    for (int64_t id : tokenizer.encode(text)) push(id, pending_loss);
    first_text = false;
    pending.clear();
  };
  // kJoined pieces: the text in one piece, and where each piece with loss ends (byte ranges of `joined`).
  std::string joined;
  std::vector<std::pair<size_t, size_t>> joined_loss;
  auto flush_joined = [&] {
    if (joined.empty()) return;
    const auto enc = tokenizer.encode_with_offsets(joined, /*split_special=*/true);
    for (size_t i = 0; i < enc.ids.size(); ++i) {
      const size_t at = enc.offsets[i].first;
      const bool loss = std::any_of(joined_loss.begin(), joined_loss.end(),
                                    [at](const auto& r) { return at >= r.first && at < r.second; });
      push(enc.ids[i], loss);
    }
    first_text = false;
    joined.clear();
    joined_loss.clear();
  };
  auto add_joined = [&](const std::string& text, bool loss) {
    if (loss && !text.empty()) joined_loss.emplace_back(joined.size(), joined.size() + text.size());
    joined += text;
  };
  const bool joined_template =
      std::any_of(segments.begin(), segments.end(), [](const Segment& s) { return s.kind == Kind::kJoined; });
  for (const auto& seg : segments) {
    if (seg.kind == Kind::kText) {
      if (seg.text.empty()) continue;
      flush_joined();
      if (!pending.empty() && pending_loss != seg.loss) flush();
      pending += seg.text;
      pending_loss = seg.loss;
      continue;
    }
    if (seg.kind == Kind::kJoined) {
      flush();
      add_joined(seg.text, seg.loss);
      continue;
    }
    if (seg.kind == Kind::kEncoded) {
      flush();
      flush_joined();
      // mistral-common encodes each message by itself; a leading space shows the word marker the encoding adds.
      std::string_view text = seg.text;
      if (tokenizer.adds_dummy_prefix() && !text.empty() && text[0] == ' ') text.remove_prefix(1);
      if (!text.empty()) {
        for (int64_t id : tokenizer.encode(text, /*split_special=*/true)) push(id, seg.loss);
      }
      first_text = false;
      continue;
    }
    if (seg.kind == Kind::kSpecial) {
      const int64_t id = tokenizer.piece_to_id(seg.text);
      if (id < 0) {  // the tokenizer lacks the marker: it is ordinary text
        if (joined_template) {
          add_joined(seg.text, seg.loss);
          continue;
        }
        if (!pending.empty() && pending_loss != seg.loss) flush();
        pending += seg.text;
        pending_loss = seg.loss;
        continue;
      }
      flush();
      flush_joined();
      push(id, seg.loss);
      continue;
    }
    flush();
    flush_joined();
    const int64_t id = seg.kind == Kind::kBos ? tokenizer.bos_id() : tokenizer.eos_id();
    if (id >= 0) push(id, seg.loss);
  }
  flush();
  flush_joined();
  return out;
}

}  // namespace ft::chat

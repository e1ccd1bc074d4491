// Rendered segments as a string (segments_to_string) and as token ids with their loss mask (tokenize_segments).
#include <algorithm>
#include <string_view>

#include "chat/templates.h"
#include "tokenizer/tokenizer.h"

namespace ft::chat {
namespace {

using Kind = Segment::Kind;

// Feeds segments in order, buffering a text run (kText pieces of one loss flag) or a kJoined run until something
// else ends it, so each run is encoded with one encode() call.
class SegmentEncoder {
 public:
  SegmentEncoder(const tok::Tokenizer& tokenizer, bool joined_template)
      : tokenizer_(tokenizer), joined_template_(joined_template) {}

  void add(const Segment& seg) {
    switch (seg.kind) {
      case Kind::kText:
        if (seg.text.empty()) return;
        flush_joined();
        add_text(seg.text, seg.loss);
        return;
      case Kind::kJoined:
        flush_text();
        add_joined(seg.text, seg.loss);
        return;
      case Kind::kEncoded:
        add_encoded(seg);
        return;
      case Kind::kSpecial:
        add_special(seg);
        return;
      case Kind::kBos:
      case Kind::kEos: {
        flush_text();
        flush_joined();
        const int64_t id = seg.kind == Kind::kBos ? tokenizer_.bos_id() : tokenizer_.eos_id();
        if (id >= 0) push(id, seg.loss);
        return;
      }
    }
  }

  TokenizedSample finish() && {
    flush_text();
    flush_joined();
    return std::move(out_);
  }

 private:
  void push(int64_t id, bool loss) {
    out_.tokens.push_back(static_cast<int32_t>(id));
    out_.loss.push_back(loss ? 1 : 0);
  }

  void add_text(const std::string& text, bool loss) {
    if (!pending_.empty() && pending_loss_ != loss) flush_text();
    pending_ += text;
    pending_loss_ = loss;
  }

  void flush_text() {
    if (pending_.empty()) return;
    // Each run is encoded on its own, so sentencepiece adds its word marker again; a run that continues the
    // text and starts with a space lets that marker stand for the space, as encoding the whole string would.
    std::string_view text = pending_;
    if (!first_text_ && tokenizer_.adds_dummy_prefix() && text.size() > 1 && text[0] == ' ') text.remove_prefix(1);
    for (int64_t id : tokenizer_.encode(text)) push(id, pending_loss_);
    first_text_ = false;
    pending_.clear();
  }

  void add_joined(const std::string& text, bool loss) {
    if (loss && !text.empty()) joined_loss_.emplace_back(joined_.size(), joined_.size() + text.size());
    joined_ += text;
  }

  void flush_joined() {
    if (joined_.empty()) return;
    const auto enc = tokenizer_.encode_with_offsets(joined_, /*split_special=*/true);
    for (size_t i = 0; i < enc.ids.size(); ++i) {
      const size_t at = enc.offsets[i].first;
      const bool loss = std::any_of(joined_loss_.begin(), joined_loss_.end(),
                                    [at](const auto& r) { return at >= r.first && at < r.second; });
      push(enc.ids[i], loss);
    }
    first_text_ = false;
    joined_.clear();
    joined_loss_.clear();
  }

  void add_encoded(const Segment& seg) {
    flush_text();
    flush_joined();
    // mistral-common encodes each message by itself; a leading space shows the word marker the encoding adds.
    std::string_view text = seg.text;
    if (tokenizer_.adds_dummy_prefix() && !text.empty() && text[0] == ' ') text.remove_prefix(1);
    if (!text.empty()) {
      for (int64_t id : tokenizer_.encode(text, /*split_special=*/true)) push(id, seg.loss);
    }
    first_text_ = false;
  }

  void add_special(const Segment& seg) {
    const int64_t id = tokenizer_.piece_to_id(seg.text);
    if (id < 0) {  // the tokenizer lacks the marker: it is ordinary text
      if (joined_template_) {
        add_joined(seg.text, seg.loss);
      } else {
        add_text(seg.text, seg.loss);
      }
      return;
    }
    flush_text();
    flush_joined();
    push(id, seg.loss);
  }

  const tok::Tokenizer& tokenizer_;
  const bool joined_template_;  // some segment is kJoined: a missing marker joins the kJoined run
  TokenizedSample out_;
  std::string pending_;  // the text run
  bool pending_loss_ = false;
  bool first_text_ = true;
  // The kJoined run in one piece, and where each piece with loss lies in it (byte ranges of `joined_`).
  std::string joined_;
  std::vector<std::pair<size_t, size_t>> joined_loss_;
};

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
  const bool joined_template =
      std::any_of(segments.begin(), segments.end(), [](const Segment& s) { return s.kind == Kind::kJoined; });
  SegmentEncoder encoder(tokenizer, joined_template);
  for (const auto& seg : segments) encoder.add(seg);
  return std::move(encoder).finish();
}

}  // namespace ft::chat

// The unit the encode pipeline works on: a stretch of (normalized) text, or an added token already resolved.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft::tok {

struct Piece {
  std::string text;
  int32_t id = -1;        // >= 0: an added token; the later stages leave it alone
  bool at_start = false;  // starts at offset 0 of the original text (Metaspace's prepend_scheme "first")
  // Offsets only (empty when not tracked): per byte of `text`, the original byte range of the character it came
  // from, as tokenizers' NormalizedString alignments. Every stage that edits `text` keeps it in step.
  std::vector<std::pair<size_t, size_t>> align;
};

using Align = std::vector<std::pair<size_t, size_t>>;

// Identity alignment of `text` starting at original byte `base`: each byte maps to its character's range.
inline Align char_alignment(std::string_view text, size_t base) {
  Align a(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t n = 1;
    const auto b = static_cast<unsigned char>(text[i]);
    if (b >= 0xF0) {
      n = 4;
    } else if (b >= 0xE0) {
      n = 3;
    } else if (b >= 0xC0) {
      n = 2;
    }
    n = std::min(n, text.size() - i);
    for (size_t k = 0; k < n; ++k) a[i + k] = {base + i, base + i + n};
    i += n;
  }
  return a;
}

using Pieces = std::vector<Piece>;

}  // namespace ft::tok

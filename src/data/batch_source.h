// What a DataLoader draws its batches from: numbered items (SFT samples, or preference pairs) with their lengths,
// and how the items of a batch become its tensors. The loader owns order, sharding, packing into rows, prefetch
// and resume; a source only answers for its items.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "data/batch.h"

namespace ft::data {

// The rows of a batch: each row lists the items it holds (one without packing).
using RowPlan = std::vector<std::vector<int64_t>>;

// How a batch's rows become tensors.
struct CollateOptions {
  int64_t seq_len = 0;  // packing: the length of every row; else the most that rounding to pad_multiple pads to
  bool packing = false;
  int64_t pad_id = 0;        // input id of padding (labels are -100 there)
  int64_t pad_multiple = 1;  // without packing: the batch length is rounded up to a multiple of this
  bool pin_memory = false;   // page-locked host tensors, for asynchronous copies to a GPU
};

// The length T of an unpacked batch whose longest row is `longest`: rounded up to a multiple of `multiple`, so that
// batches come in few shapes (cuDNN attention builds a plan for every new one), but not beyond `cap` unless the
// longest row itself is longer.
inline int64_t padded_length(int64_t longest, int64_t multiple, int64_t cap) {
  if (multiple <= 1) return longest;
  const int64_t rounded = (longest + multiple - 1) / multiple * multiple;
  return std::max(longest, std::min(rounded, cap));
}

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Items per epoch (after weighting).
  virtual int64_t size() const = 0;
  // Tokens of item i, the room it takes in a packed row (0 <= i < size()).
  virtual int64_t length(int64_t i) const = 0;
  // The longest an item may be: packed rows are at least this long.
  virtual int64_t seq_len() const = 0;
  // The tensors of one batch (CPU; page-locked when options.pin_memory).
  virtual Batch collate(const RowPlan& rows, const CollateOptions& options) const = 0;
};

}  // namespace ft::data

// What a DataLoader draws its batches from: numbered items (SFT samples, or preference pairs) with their lengths,
// and how the items of a batch become its tensors. The loader owns order, sharding, packing into rows, prefetch
// and resume; a source only answers for its items.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"

namespace ft::data {

// The rows of a batch: each row lists the items it holds (one without packing).
using RowPlan = std::vector<std::vector<int64_t>>;

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Items per epoch (after weighting).
  virtual int64_t size() const = 0;
  // Tokens of item i, the room it takes in a packed row (0 <= i < size()).
  virtual int64_t length(int64_t i) const = 0;
  // The longest an item may be: packed rows are at least this long.
  virtual int64_t seq_len() const = 0;
  // The tensors of one batch (CPU; page-locked when `pin_memory`). `seq_len`: the row length when packing.
  virtual Batch collate(const RowPlan& rows, int64_t seq_len, bool packing, int64_t pad_id, bool pin_memory) const = 0;
};

}  // namespace ft::data

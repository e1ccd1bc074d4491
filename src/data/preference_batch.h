// collate_preference with the loader's collate options: unpacked batches padded to a multiple, as SFT's collate does.
#pragma once

#include <vector>

#include "data/batch_source.h"
#include "data/preference.h"

namespace ft::data {

// collate_preference (data/preference.h) where, without packing, the rows are right-padded to
// padded_length(longest sequence, options.pad_multiple, options.seq_len); with packing options.seq_len is unused.
Batch collate_preference(const std::vector<const PreferencePair*>& pairs, const CollateOptions& options);

}  // namespace ft::data

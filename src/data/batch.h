// One micro-batch as the trainer consumes it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace ft::data {

inline constexpr int64_t kIgnoreIndex = -100;  // label of positions that carry no loss

struct Batch {
  at::Tensor input_ids;     // I64 [B, T]
  at::Tensor labels;        // I64 [B, T]: input_ids[b][t+1] when that token is a target, else -100
  at::Tensor position_ids;  // I64 [B, T], restarting at 0 for each packed sample
  at::Tensor segment_ids;   // I32 [B, T] when packing (one id per sample in a row, padding its own id), else undefined
  at::Tensor cu_seqlens;    // I32 [S + 1] when packing: start of each sample (and padding tail) in the flattened
                            // [B * T] tokens, then B * T (varlen attention's cumulative lengths), else undefined
  int64_t max_seqlen = 0;   // when packing: the longest of those S pieces
  int64_t num_target_tokens = 0;  // labels != -100, counted on the host
  int64_t num_samples = 0;        // samples in the batch (packed samples counted one by one)
};

}  // namespace ft::data

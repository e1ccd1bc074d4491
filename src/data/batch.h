// One micro-batch as the trainer consumes it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

namespace ft::data {

inline constexpr int64_t kIgnoreIndex = -100;  // label of positions that carry no loss

// How a preference batch's rows hold its pairs (data/preference.h): P pairs as 2P sequences, the chosen ones of
// pairs 0..P-1 first, then their rejected ones (TRL's order).
struct PairLayout {
  at::Tensor sequence_ids;       // I64 [B, T]: the sequence (0..2P-1) each position belongs to, -1 on padding
  at::Tensor completion_tokens;  // I64 [2P]: completion tokens per sequence (TRL's completion_mask.sum(1): IPO's
                                 // divisor in DPOTrainer)
  at::Tensor target_tokens;      // I64 [2P]: labels per sequence, the tokens each log-prob sum runs over (the
                                 // divisor of CPO/ORPO's averages); one less than completion_tokens when a
                                 // sequence starts with a completion token (keep_end cut its whole prompt)
  int64_t num_pairs = 0;
  at::Tensor reference_logps;  // F32 [2P]: the reference model's completion log-prob of each sequence, when they were
                               // computed before training (preference.precompute_ref_logps), else undefined
};

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
  std::optional<PairLayout> pairs;  // preference batches only
};

}  // namespace ft::data

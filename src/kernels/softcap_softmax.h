// The pointwise middle of soft-capped attention (Gemma 2) in one CUDA kernel per direction: between the two GEMMs
// (scores = q k^T, out = probs v) everything is row-wise, so one pass replaces scale, tanh, cap, mask, an F32
// softmax and the cast back (and their six backward passes).
// Plain CUDA: no LibTorch header; the caller passes raw pointers to contiguous [rows, cols] matrices and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// Rows are queries of [batch, heads, queries] in that order (row r is query r % queries of batch
// r / rows_per_batch); cols are the keys. Query i sits at key position i + offset (offset = keys - queries).
struct SoftcapRows {
  int64_t rows = 0, cols = 0;
  int64_t queries = 1;         // queries per head
  int64_t rows_per_batch = 1;  // heads * queries
  int64_t offset = 0;          // position of query 0 among the keys
  bool causal = false;         // a query sees the keys up to its own position
  const bool* mask = nullptr;  // Bool [B or 1, queries, cols], true = visible; null: none
  int64_t mask_batch_stride = 0;  // elements between two batches' masks; 0: one mask for every batch
  float scale = 1.0f;          // applied to the raw scores before capping
  float cap = 1.0f;            // the soft-cap: z = cap * tanh(scale * s / cap)
};

// scores: in, the raw q k^T; out, t = tanh(scale * s / cap) (where a row's causal range reaches; beyond it the raw
// scores stay). probs: out, softmax over the visible z of each row (F32 math, rounded once), 0 where masked; a row
// that sees no key gets all zeros.
void softcap_softmax_forward(const SoftcapRows& rows, void* scores, void* probs, DType dtype, void* stream);

// grad: in, dL/dprobs; out, dL/dscores = probs (grad - sum(grad probs)) (1 - t^2) scale, with t and probs from the
// forward.
void softcap_softmax_backward(const SoftcapRows& rows, const void* t, const void* probs, void* grad, DType dtype,
                              void* stream);

}  // namespace ft::kernels

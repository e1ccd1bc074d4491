// Causal attention over packed short pieces: rows packed with samples of at most kShortPieceMax tokens (short
// instructions, classification, tool calls). Varlen flash attention gives every piece its own 128-row tile, so a
// 20-token sample fills a sixth of it and the cost follows the number of samples; here a block takes 64 consecutive
// tokens of the flattened batch, whatever pieces they belong to, with the 128 keys a piece of <= 64 tokens can reach,
// and masks by piece inside the tile, so the cost follows the tokens.
// Plain CUDA (tensor cores through WMMA): no LibTorch header; contiguous tensors as raw pointers and a stream.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ft::kernels {

// The longest piece the kernels take: a query tile of 64 tokens reaches back at most 63 keys before its first one.
constexpr int64_t kShortPieceMax = 64;

struct ShortAttentionShape {
  int64_t tokens = 0;  // N: the flattened [B * T] tokens
  int heads = 0;       // H, a multiple of kv_heads (grouped queries read KV head h / (H / Hkv))
  int kv_heads = 0;    // Hkv
  int head_dim = 0;    // D: 64 or 128 (short_attention_supports)
  float scale = 1.0f;  // applied to q k^T before the softmax
};

// Whether the kernels take this head size and element type (BF16 or F16).
bool short_attention_supports(int head_dim, DType dtype);

// q [N, H, D], k and v [N, Hkv, D], out [N, H, D] (16-byte aligned rows); piece_start I32 [N]: the first token of
// the piece each token belongs to, so query i sees keys piece_start[i] .. i. lse F32 [H, N]: the log2-sum-exp of
// each query's scaled scores (times log2(e)), kept for the backward.
void short_attention_forward(const ShortAttentionShape& shape, const void* q, const void* k, const void* v,
                             const int32_t* piece_start, void* out, float* lse, DType dtype, void* stream);

// The gradients of q, k and v from d_out [N, H, D] and the forward's out and lse. delta F32 [H, N] is scratch
// (rowsum(d_out * out)). d_k and d_v are written whole by one block per 64 keys: no atomics, deterministic.
struct ShortAttentionGrads {
  const void* d_out = nullptr;
  void* d_q = nullptr;
  void* d_k = nullptr;
  void* d_v = nullptr;
  float* delta = nullptr;
};
void short_attention_backward(const ShortAttentionShape& shape, const void* q, const void* k, const void* v,
                              const void* out, const int32_t* piece_start, const float* lse,
                              const ShortAttentionGrads& grads, DType dtype, void* stream);

}  // namespace ft::kernels

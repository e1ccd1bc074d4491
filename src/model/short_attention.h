// Causal attention over rows packed with short samples (pieces of at most kernels::kShortPieceMax tokens), on CUDA:
// our kernels (kernels/short_attention.h) behind an autograd Function. Varlen flash attention pays a 128-row tile
// per piece, so its cost follows the number of samples; these kernels pay per 64 tokens, whatever the pieces.
#pragma once

#include <ATen/ATen.h>

namespace ft::model {

// True when this build has the kernels and they take these inputs: CUDA, q, k and v of one dtype (BF16 or F16),
// head_dim 64 or 128, H a multiple of Hkv, and no piece longer than kernels::kShortPieceMax (`max_seqlen`).
bool short_attention_available(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t max_seqlen);

// q [B, T, H, D], k/v [B, T, Hkv, D] over the flattened B * T tokens, piece_start I32 [B * T]: the first token of
// each token's piece (AttentionMask::piece_start), so query i sees keys piece_start[i] .. i;
// returns [B, T, H * D]. Precondition: short_attention_available.
at::Tensor short_piece_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& piece_start, double scale);

}  // namespace ft::model

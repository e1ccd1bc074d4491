// Attention: the per-batch plan (which kernel and which mask each kind of layer takes, and the log line that names
// them) and the one entry point that runs it: varlen flash attention, SDPA, or soft-capped attention (our CUDA
// kernel or the eager composite).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/args.h"
#include "model/kernel_policy.h"

namespace ft::model {

// Keys and values of every layer, for incremental decoding. Buffers grow on demand.
struct KVCache {
  std::vector<at::Tensor> keys;    // per layer: [B, Hkv, capacity, D] in the dtype of the first keys written
  std::vector<at::Tensor> values;  // per layer: [B, Hkv, capacity, D]
  int64_t length = 0;              // positions filled so far (the same for every layer)
  // I64 [B] on the model's device: each row's first real position when prompts of different lengths are left-padded
  // into one batch. Keys before it are padding that no real query sees. Undefined: every position is real.
  at::Tensor first_real;

  // Appends k, v ([B, Hkv, T, D]) for `layer` at position `length`; returns the filled prefix of keys and values.
  std::pair<at::Tensor, at::Tensor> append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
};

// Packed rows as varlen attention wants them: piece offsets in the flattened [B * T] tokens.
struct PackedPieces {
  at::Tensor cu_seqlens;   // I32 [S + 1] on the model's device
  int64_t max_seqlen = 0;  // the longest piece
};

enum class AttentionKernel {
  kSdpa,         // at::scaled_dot_product_attention
  kFlashVarlen,  // FlashAttention-2 over pieces of the flattened tokens (ATen's private _flash_attention_forward)
  kSoftcap,      // logit soft-capping (Gemma 2), which SDPA and flash attention lack: our kernel or the eager composite
  kShortPieces,  // packed pieces of <= 64 tokens: our kernel, 64 tokens per tile whatever the pieces
                 // (short_attention.h)
};

// One kind of layer's part of the plan: its kernel and how it masks keys. With `cu_seqlens` defined (kFlashVarlen):
// causal within each piece (packed rows, or each row one piece when only the sliding window needs a mask).
// Otherwise is_causal when `mask` is undefined and `causal` is set, else the bool mask [B or 1, 1, T, S]
// (true = attend) or no mask at all (single-token decoding).
struct AttentionMask {
  AttentionKernel kernel = AttentionKernel::kSdpa;
  at::Tensor mask;  // Bool [B or 1, 1, T, S] or undefined
  bool causal = true;
  at::Tensor cu_seqlens;   // I32 [S + 1] on the device: piece starts in the flattened [B * T] tokens, or undefined
  int64_t max_seqlen = 0;  // the longest piece
  int64_t window = 0;      // varlen: sliding window (a query sees the `window` latest keys, itself included); 0 = off
  at::Tensor piece_start;  // kShortPieces: I32 [B * T], the first token of each token's piece
  bool varlen() const { return cu_seqlens.defined(); }
};

// One forward's tokens as the attention rule sees them.
struct AttentionBatch {
  at::Tensor segment_ids;                // I32 [B, T] (packing) or undefined
  const PackedPieces* packed = nullptr;  // the same pieces as varlen offsets, or nullptr
  int64_t rows = 0, length = 0;          // B and T (the new positions)
  int64_t past = 0;                      // positions already in the KV cache
  bool cached = false;                   // a KV cache is in use
  at::Tensor first_real;                 // I64 [B]: the cache's left padding (KVCache::first_real), or undefined
  at::Device device = at::kCPU;
  at::ScalarType compute_dtype = at::kFloat;  // this forward's (autocast's, else the parameters')
};

// The attention of one batch, computed once before the layers run.
struct AttentionPlan {
  std::array<AttentionMask, 2> masks;  // [0]: layers of full attention, [1]: layers with a sliding window

  const AttentionMask& for_layer(const ModelArgs& args, int64_t layer) const {
    return masks[args.layer_slides(layer) ? 1 : 0];
  }
  // The masks the model's layer kinds need (the sliding one only when some layer has a window).
  static AttentionPlan build(const ModelArgs& args, const KernelPolicy& policy, const AttentionBatch& batch);
  // What a training forward (packed rows or not) takes under `policy`, for the log line "kernels: attention ...".
  static std::string describe(const ModelArgs& args, const KernelPolicy& policy, bool packed);
};

// How one layer scores its keys.
struct AttentionScores {
  std::optional<double> scale;    // gemma: query_pre_attn_scalar^-1/2; unset = head_dim^-1/2
  std::optional<double> softcap;  // gemma2: attn_logit_softcapping
};

namespace ops {
// The entry point of attention: q [B, T, H, D], k/v [B, T, Hkv, D] (H a multiple of Hkv) attended as `mask` (this
// layer's part of the plan) says; with a cache, k and v are appended at `layer` first. Returns [B, T, H * D].
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                     const AttentionScores& scores, const KernelPolicy& policy, KVCache* cache = nullptr,
                     int64_t layer = 0);
}  // namespace ops

// The eager soft-capped attention (transformers' eager_attention_forward): q [B, H, T, D], k/v [B, Hkv, S, D] with H
// a multiple of Hkv; mask Bool [B or 1, 1, T, S] (true = visible) or undefined; causal (with no mask): query i sees
// keys up to i + S - T. scores = cap * tanh(q k^T * scale / cap), softmax in F32, back to q's dtype, times v.
// Returns [B, H, T, D]. The fused kernel of the same math: model/softcap_attention.h.
at::Tensor softcapped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                bool causal, double scale, double cap);

}  // namespace ft::model

#include "model/attention.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "kernels/short_attention.h"
#include "model/short_attention.h"
#include "model/softcap_attention.h"
#include "util/error.h"

namespace ft::model {

std::pair<at::Tensor, at::Tensor> KVCache::append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  if (static_cast<int64_t>(keys.size()) <= layer) {
    keys.resize(layer + 1);
    values.resize(layer + 1);
  }
  const int64_t t = k.size(2);
  at::Tensor& kb = keys[layer];
  at::Tensor& vb = values[layer];
  if (!kb.defined() || kb.size(2) < length + t) {
    // Grow geometrically so decoding N tokens copies O(N) elements in total.
    const int64_t capacity = std::max<int64_t>(length + t, kb.defined() ? 2 * kb.size(2) : length + t + 64);
    auto grow = [&](at::Tensor& buf, const at::Tensor& like) {
      at::Tensor bigger = at::empty({like.size(0), like.size(1), capacity, like.size(3)}, like.options());
      if (buf.defined() && length > 0) bigger.narrow(2, 0, length).copy_(buf.narrow(2, 0, length));
      buf = bigger;
    };
    grow(kb, k);
    grow(vb, v);
  }
  kb.narrow(2, length, t).copy_(k);
  vb.narrow(2, length, t).copy_(v);
  return {kb.narrow(2, 0, length + t), vb.narrow(2, 0, length + t)};
}

namespace {

// How a layer kind masks its keys in one batch.
enum class MaskKind {
  kCausal,        // SDPA's is_causal (no tensor)
  kNone,          // one new token sees every cached key
  kDense,         // a bool [B or 1, 1, T, S] mask: segments, a window, or decoding several tokens
  kPackedPieces,  // varlen offsets of the packed samples
  kRowPieces,     // varlen offsets with each row one piece (unpacked rows under a window)
};

struct AttentionChoice {
  AttentionKernel kernel;
  MaskKind mask;
};

// The facts of a batch the rule reads; `windowed`: the layer kind's window is shorter than its keys.
struct RuleInputs {
  bool segments = false, offsets = false, cached = false, windowed = false, padded = false;
  int64_t past = 0, length = 0;
  int64_t max_piece = 0;  // the longest packed piece (offsets)
  at::Device device = at::kCPU;
  at::ScalarType compute_dtype = at::kFloat;
};

// FlashAttention-2's limits: the fused paths on CUDA, half precision, head_dim a multiple of 8 up to 256, no logit
// soft-capping.
bool varlen_ok(const ModelArgs& a, const KernelPolicy& policy, at::Device device, at::ScalarType dtype) {
  return policy.fused_for(device) && (dtype == at::kBFloat16 || dtype == at::kHalf) && a.head_dim % 8 == 0 &&
         a.head_dim <= 256 && !a.attn_logit_softcapping;
}

// Our kernel for packed short pieces: within varlen's limits, pieces of <= kShortPieceMax tokens, head_dim 64 or
// 128, no window short enough to matter.
bool short_pieces_ok(const ModelArgs& a, const KernelPolicy& policy, const RuleInputs& in) {
  return policy.kernels_for(in.device) && in.max_piece <= kernels::kShortPieceMax && !in.windowed &&
         (a.head_dim == 64 || a.head_dim == 128);
}

// The one rule of which kernel and mask a layer kind takes.
AttentionChoice choose(const ModelArgs& a, const KernelPolicy& policy, const RuleInputs& in) {
  const bool varlen = varlen_ok(a, policy, in.device, in.compute_dtype);
  if (in.segments && in.offsets && in.past == 0 && varlen) {
    const bool short_pieces = short_pieces_ok(a, policy, in);
    return {short_pieces ? AttentionKernel::kShortPieces : AttentionKernel::kFlashVarlen, MaskKind::kPackedPieces};
  }
  // Unpacked rows under a window: flash attention has the window and SDPA only a dense mask.
  if (!in.segments && in.windowed && !in.cached && varlen) return {AttentionKernel::kFlashVarlen, MaskKind::kRowPieces};
  const AttentionKernel kernel = a.attn_logit_softcapping ? AttentionKernel::kSoftcap : AttentionKernel::kSdpa;
  if (!in.segments && !in.windowed && !in.padded) {
    if (in.past == 0) return {kernel, MaskKind::kCausal};  // plain causal: SDPA's is_causal
    if (in.length == 1) return {kernel, MaskKind::kNone};
  }
  return {kernel, MaskKind::kDense};
}

// The bool mask [B or 1, 1, T, S] (true = attend) of T new positions after `past` cached ones, within `window`
// positions when windowed, within each segment when packed, and from each row's first real key when left-padded.
at::Tensor dense_mask(const AttentionBatch& batch, std::optional<int64_t> window) {
  const int64_t s = batch.past + batch.length;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(batch.device);
  const at::Tensor q_pos = at::arange(batch.past, s, opts).unsqueeze(1);  // [T, 1]
  const at::Tensor k_pos = at::arange(0, s, opts).unsqueeze(0);           // [1, S]
  at::Tensor m = k_pos <= q_pos;                                          // [T, S]
  if (window) m = m.logical_and(q_pos - k_pos < *window);
  m = m.unsqueeze(0);  // [1, T, S]
  if (batch.segment_ids.defined()) {
    const at::Tensor seg = batch.segment_ids.to(batch.device);  // [B, T]
    m = m.logical_and(seg.unsqueeze(2) == seg.unsqueeze(1));    // [B, T, T]
  }
  if (batch.first_real.defined()) {
    const at::Tensor first = batch.first_real.to(batch.device).view({-1, 1, 1});  // [B, 1, 1]
    const at::Tensor real_key = k_pos.unsqueeze(0) >= first;                      // [B, 1, S]
    // A padding query sees itself, so that its row of scores has a finite softmax and its (unused) keys and values
    // stay finite: a masked key weighs exactly 0, but 0 * NaN would still poison the real rows.
    const at::Tensor itself = (k_pos == q_pos).unsqueeze(0);  // [1, T, S]
    m = m.logical_and(real_key.logical_or(itself));           // [B, T, S]
  }
  return m.unsqueeze(1);  // [B or 1, 1, T, S]
}

// The first token of each token's piece, I32 [B * T], from the pieces' offsets (their last one is B * T): on the
// device, without a host sync.
at::Tensor piece_starts(const at::Tensor& cu_seqlens, const AttentionBatch& batch) {
  const int64_t pieces = cu_seqlens.size(0) - 1;
  const at::Tensor starts = cu_seqlens.narrow(0, 0, pieces);            // I32 [S]
  const at::Tensor lengths = cu_seqlens.narrow(0, 1, pieces) - starts;  // I32 [S]
  return at::repeat_interleave(starts, lengths, /*dim=*/0, /*output_size=*/batch.rows * batch.length);
}

// The mask of the layers whose keys reach back `window` positions at most (nullopt: unlimited).
AttentionMask build_mask(const ModelArgs& a, const KernelPolicy& policy, const AttentionBatch& batch,
                         std::optional<int64_t> window) {
  const bool windowed = window.has_value() && batch.past + batch.length > *window;
  RuleInputs in;
  in.segments = batch.segment_ids.defined();
  in.offsets = batch.packed != nullptr && batch.packed->cu_seqlens.defined();
  if (in.offsets) in.max_piece = batch.packed->max_seqlen;
  in.cached = batch.cached;
  in.padded = batch.first_real.defined();
  in.windowed = windowed;
  in.past = batch.past;
  in.length = batch.length;
  in.device = batch.device;
  in.compute_dtype = batch.compute_dtype;
  const AttentionChoice choice = choose(a, policy, in);
  AttentionMask out;
  out.kernel = choice.kernel;
  out.causal = choice.mask == MaskKind::kCausal;
  switch (choice.mask) {
    case MaskKind::kCausal:
    case MaskKind::kNone:
      break;
    case MaskKind::kDense:
      out.mask = dense_mask(batch, windowed ? window : std::nullopt);
      break;
    case MaskKind::kPackedPieces:
      out.cu_seqlens = batch.packed->cu_seqlens;
      out.max_seqlen = batch.packed->max_seqlen;
      out.window = windowed ? *window : 0;
      if (out.kernel == AttentionKernel::kShortPieces) out.piece_start = piece_starts(out.cu_seqlens, batch);
      break;
    case MaskKind::kRowPieces:
      out.cu_seqlens = at::arange(0, (batch.rows + 1) * batch.length, batch.length,
                                  at::TensorOptions().dtype(at::kInt).device(batch.device));
      out.max_seqlen = batch.length;
      out.window = *window;
      break;
  }
  return out;
}

}  // namespace

AttentionPlan AttentionPlan::build(const ModelArgs& a, const KernelPolicy& policy, const AttentionBatch& batch) {
  bool any_full = false, any_sliding = false;
  for (int64_t i = 0; i < a.num_layers; ++i) (a.layer_slides(i) ? any_sliding : any_full) = true;
  AttentionPlan plan;
  if (any_full) plan.masks[0] = build_mask(a, policy, batch, std::nullopt);
  if (any_sliding) plan.masks[1] = build_mask(a, policy, batch, a.sliding_window);
  return plan;
}

std::string AttentionPlan::describe(const ModelArgs& a, const KernelPolicy& policy, bool packed) {
  RuleInputs in;  // a training forward: no cache, rows longer than any window
  in.segments = in.offsets = packed;
  in.max_piece = kernels::kShortPieceMax;  // the kernel a batch of short pieces takes; longer ones take varlen
  in.device = policy.device;
  in.compute_dtype = policy.compute_dtype;
  const AttentionChoice full = choose(a, policy, in);
  const char* block_mask = " with a block-diagonal mask (packed rows)";
  std::string path;
  if (full.kernel == AttentionKernel::kSoftcap) {
    path = policy.kernels_for(policy.device)
               ? "soft-capped attention kernel (logit soft-capping, which SDPA and flash attention lack)"
               : "eager (logit soft-capping, which SDPA and flash attention lack)";
    if (full.mask == MaskKind::kDense) path += block_mask;
  } else if (full.kernel == AttentionKernel::kFlashVarlen) {
    path = "varlen flash attention over packed pieces";
  } else if (full.kernel == AttentionKernel::kShortPieces) {
    path = "short-piece attention kernel over packed pieces of <= " + std::to_string(kernels::kShortPieceMax) +
           " tokens, varlen flash attention over longer ones";
  } else {
    path = full.mask == MaskKind::kDense ? std::string("SDPA") + block_mask : "SDPA (causal)";
  }
  if (a.sliding_window) {
    in.windowed = true;
    const bool flash = choose(a, policy, in).kernel == AttentionKernel::kFlashVarlen;
    path += "; sliding window of " + std::to_string(*a.sliding_window) +
            (a.sliding_layers.empty() ? "" : " on the sliding layers") +
            (flash ? " through varlen flash attention" : " as a dense mask");
  }
  return path;
}

namespace {

// ATen's private FlashAttention-2 entry, its positional arguments by name.
struct FlashVarlenArgs {
  at::Tensor query, key, value;        // [N, H, D], [N, Hkv, D], [N, Hkv, D]: the flattened tokens
  at::Tensor cu_seqlens;               // I32 [S + 1]: the same pieces for queries and keys
  int64_t max_seqlen = 0;              // the longest piece
  std::optional<double> scale;         // unset: head_dim^-1/2
  std::optional<int64_t> window_left;  // keys before the query it still sees; unset: all (causal)
};

at::Tensor flash_varlen_forward(const FlashVarlenArgs& f) {
  const double dropout_p = 0.0;
  const bool is_causal = true, return_debug_mask = false;
  const std::optional<int64_t> window_right =
      f.window_left ? std::optional<int64_t>(0) : std::nullopt;  // causal: no key after the query
  return std::get<0>(at::_flash_attention_forward(f.query, f.key, f.value, f.cu_seqlens, f.cu_seqlens, f.max_seqlen,
                                                  f.max_seqlen, dropout_p, is_causal, return_debug_mask, f.scale,
                                                  f.window_left, window_right));  // [N, H, D]
}

// at::scaled_dot_product_attention, its positional arguments by name.
struct SdpaArgs {
  at::Tensor query, key, value;  // [B, H, T, D], [B, Hkv, S, D], [B, Hkv, S, D]
  at::Tensor mask;               // Bool [B or 1, 1, T, S] or undefined
  bool is_causal = false;
  std::optional<double> scale;
  bool enable_gqa = false;  // H > Hkv: SDPA repeats the keys and values per group
};

at::Tensor sdpa(const SdpaArgs& s) {
  const double dropout_p = 0.0;
  const std::optional<at::Tensor> attn_mask = s.mask.defined() ? std::optional<at::Tensor>(s.mask) : std::nullopt;
  return at::scaled_dot_product_attention(s.query, s.key, s.value, attn_mask, dropout_p, s.is_causal, s.scale,
                                          s.enable_gqa);  // [B, H, T, D]
}

// Packed rows: every piece is its own causal sequence over the flattened tokens; no [T, T] mask exists.
at::Tensor varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                            const AttentionScores& scores) {
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), d = q.size(3);
  FlashVarlenArgs f;
  f.query = q.reshape({b * t, h, d});          // [B * T, H, D]
  f.key = k.reshape({b * t, k.size(2), d});    // [B * T, Hkv, D]
  f.value = v.reshape({b * t, v.size(2), d});  // [B * T, Hkv, D]
  f.cu_seqlens = mask.cu_seqlens;
  f.max_seqlen = mask.max_seqlen;
  f.scale = scores.scale;
  if (mask.window > 0) f.window_left = mask.window - 1;  // a query sees itself and the window - 1 keys before it
  return flash_varlen_forward(f).view({b, t, h * d});
}

// q [B, H, T, D], k/v [B, Hkv, S, D] -> [B, H, T, D], through our kernel where the policy and the tensors allow.
at::Tensor softcap_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                             const AttentionScores& scores, const KernelPolicy& policy) {
  const double scale = scores.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (policy.kernels_for(q) && fused_softcap_available(q, k, v)) {
    return fused_softcapped_attention(q, k, v, mask.mask, mask.causal, scale, *scores.softcap);
  }
  return softcapped_attention(q, k, v, mask.mask, mask.causal, scale, *scores.softcap);
}

}  // namespace

namespace ops {

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                     const AttentionScores& scores, const KernelPolicy& policy, KVCache* cache, int64_t layer) {
  if (mask.kernel == AttentionKernel::kShortPieces) {
    FT_CHECK(cache == nullptr, "short-piece attention cannot use a KV cache");
    if (short_attention_available(q, k, v, mask.max_seqlen)) {
      const double scale = scores.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
      return short_piece_attention(q, k, v, mask.piece_start, scale);
    }
    return varlen_attention(q, k, v, mask, scores);  // tensors the kernel does not take (F32 under autocast off)
  }
  if (mask.kernel == AttentionKernel::kFlashVarlen) {
    FT_CHECK(cache == nullptr, "varlen attention cannot use a KV cache");
    return varlen_attention(q, k, v, mask, scores);
  }
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), d = q.size(3);
  const at::Tensor qt = q.transpose(1, 2);                                // [B, H, T, D]
  at::Tensor kt = k.transpose(1, 2);                                      // [B, Hkv, T, D]
  at::Tensor vt = v.transpose(1, 2);                                      // [B, Hkv, T, D]
  if (cache != nullptr) std::tie(kt, vt) = cache->append(layer, kt, vt);  // [B, Hkv, S, D]
  at::Tensor out;                                                         // [B, H, T, D]
  if (mask.kernel == AttentionKernel::kSoftcap) {
    out = softcap_attention(qt, kt, vt, mask, scores, policy);
  } else {
    // SDPA needs matching dtypes; under autocast q/k/v already agree, and the cache keeps the dtype it was given.
    SdpaArgs s;
    s.query = qt;
    s.key = kt;
    s.value = vt;
    s.mask = mask.mask;
    s.is_causal = mask.causal && !mask.mask.defined();
    s.scale = scores.scale;
    s.enable_gqa = h != k.size(2);
    out = sdpa(s);
  }
  return out.transpose(1, 2).reshape({b, t, h * d});
}

}  // namespace ops

at::Tensor softcapped_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                bool causal, double scale, double cap) {
  const int64_t groups = q.size(1) / k.size(1);
  const at::Tensor keys = groups > 1 ? k.repeat_interleave(groups, 1) : k;    // [B, H, S, D]
  const at::Tensor values = groups > 1 ? v.repeat_interleave(groups, 1) : v;  // [B, H, S, D]
  at::Tensor scores = at::matmul(q, keys.transpose(2, 3)) * scale;            // [B, H, T, S]
  scores = at::tanh(scores / cap) * cap;
  at::Tensor allowed = mask;  // Bool [B or 1, 1, T, S] or undefined
  if (!allowed.defined() && causal) {
    const int64_t t = q.size(2), s = keys.size(2);
    allowed = at::ones({t, s}, q.options().dtype(at::kBool)).tril(s - t);
  }
  if (allowed.defined()) {
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  }
  const at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(probs, values);  // [B, H, T, D]
}

}  // namespace ft::model

// Building blocks of the decoder, each mirroring the transformers module of the same name so parameter names and
// numerics match Hugging Face checkpoints.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <optional>
#include <utility>
#include <vector>

#include "model/args.h"
#include "model/linear.h"

namespace ft::model {

// Keys and values of every layer, for incremental decoding. Buffers grow on demand.
struct KVCache {
  std::vector<at::Tensor> keys;    // per layer: [B, Hkv, capacity, D] in the dtype of the first keys written
  std::vector<at::Tensor> values;  // per layer: [B, Hkv, capacity, D]
  int64_t length = 0;              // positions filled so far (the same for every layer)

  // Appends k, v ([B, Hkv, T, D]) for `layer` at position `length`; returns the filled prefix of keys and values.
  std::pair<at::Tensor, at::Tensor> append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
};

// RMSNorm as transformers computes it: normalize in F32, cast back, then scale (Llama). With `unit_offset` (Gemma):
// normalize and scale by (1 + weight) in F32, then cast back; the weight starts at zero.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, bool unit_offset = false);
  at::Tensor forward(const at::Tensor& x);  // [..., dim]
  // The residual add before the norm: returns (h, norm(h)) for h = residual + delta [..., dim] (h = residual when
  // delta is undefined). Composite: exactly `h = residual + delta; forward(h)`. With `fused` on CUDA, one kernel
  // (model/norm.h) does the add and the norm, and with `gemm_input` (the norm only feeds GEMMs) under autocast it
  // writes norm(h) in the autocast dtype, the dtype the GEMMs would cast it to; otherwise in forward's dtype. The
  // norm of the same h is bitwise the same whether the add was fused or not (activation checkpointing recomputes a
  // layer from its h alone).
  std::pair<at::Tensor, at::Tensor> add_forward(const at::Tensor& residual, const at::Tensor& delta, bool gemm_input);
  at::Tensor weight;  // [dim]
  double eps;
  bool unit_offset;
  // CUDA: the kernels of model/norm.h (add_forward; forward with unit_offset) and at::_fused_rms_norm (forward, x's
  // dtype == weight's) with F32 statistics and one rounding instead of the composite; elsewhere the composite.
  bool fused = false;
};
TORCH_MODULE(RMSNorm);

// Rotary tables: inv_freq (with llama3 scaling applied) and cos/sin for given positions.
class Rotary {
 public:
  explicit Rotary(const ModelArgs& args);
  // F32 [B, T, R] cos and sin for position_ids I64 [B, T] (R = the rotated dims of a head, ModelArgs::rotary_dim);
  // computed in F32 as transformers does.
  std::pair<at::Tensor, at::Tensor> cos_sin(const at::Tensor& position_ids) const;

 private:
  at::Tensor inv_freq_;       // F32 [R/2], CPU; moved to the positions' device on use
  at::Tensor long_inv_freq_;  // longrope: F32 [R/2] for calls whose positions reach original_context_; else undefined
  int64_t original_context_ = 0;  // longrope: original_max_position_embeddings
  double scale_ = 1.0;            // longrope: cos and sin are multiplied by the attention factor
};

// q/k [B, T, H, D] rotated with cos/sin [B, T, D] (cast to q's dtype first).
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// How attention masks keys. With `cu_seqlens` defined: varlen flash attention, causal within each piece (packed
// rows, or each row one piece when only the sliding window needs a mask). Otherwise is_causal when `mask` is
// undefined and `causal` is set, else the bool mask [B or 1, 1, T, S] (true = attend) or no mask at all
// (single-token decoding).
struct AttentionMask {
  at::Tensor mask;        // Bool [B or 1, 1, T, S] or undefined
  bool causal = true;
  at::Tensor cu_seqlens;  // I32 [S + 1] on the device: piece starts in the flattened [B * T] tokens, or undefined
  int64_t max_seqlen = 0; // the longest piece
  int64_t window = 0;     // varlen: sliding window (a query sees the `window` latest keys, itself included); 0 = off
  bool varlen() const { return cu_seqlens.defined(); }
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelArgs& args);
  // x [B, T, hidden]; cos/sin [B, T, D]; returns [B, T, hidden].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const AttentionMask& mask,
                     KVCache* cache, int64_t layer_index);
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Linear qkv_proj{nullptr};  // phi3 (ModelArgs::fused_projections): q, k, v in one weight; q/k/v_proj are null then
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // qwen3, gemma3: over each head's [D] before RoPE; else null
  int64_t num_heads, num_kv_heads, head_dim;
  std::optional<double> scale;    // gemma: query_pre_attn_scalar^-1/2; unset = head_dim^-1/2
  std::optional<double> softcap;  // gemma2: attn_logit_softcapping (the eager path)
  bool fused_rope = false;     // CUDA: rotary embedding in one kernel per direction (model/rope.h)
  bool fused_linears = false;  // CUDA: q, k and v projections as one linear_group
  bool fused_softcap = false;  // CUDA: soft-capped attention through one kernel per direction (softcap_attention.h)
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const ModelArgs& args);
  at::Tensor forward(const at::Tensor& x);  // [B, T, hidden]
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  Linear gate_up_proj{nullptr};  // phi3: gate and up in one weight (gate rows first); gate/up_proj are null then
  int64_t intermediate_size;
  bool gelu_tanh;              // gemma: GeGLU (tanh-approximate GELU of the gate) instead of SwiGLU
  bool fused_linears = false;  // CUDA: gate and up projections as one linear_group, SwiGLU/GeGLU in one kernel
};
TORCH_MODULE(MLP);

// The residual stream travels between layers as a pair (residual, pending delta) whose sum is the hidden state, so
// that each norm adds the pending delta in its own kernel (RMSNormImpl::add_forward): the next layer's input norm,
// or the model's final norm, adds this layer's MLP output.
class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelArgs& args, int64_t index);
  // residual [B, T, hidden]; pending [B, T, hidden] or undefined (the first layer); cos/sin [B, T, D]. The layer's
  // input is residual + pending; returns (residual, delta) [B, T, hidden] each, the layer's output being their sum.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& residual, const at::Tensor& pending,
                                            const at::Tensor& cos, const at::Tensor& sin, const AttentionMask& mask,
                                            KVCache* cache);
  // The two halves of forward: the input norm, (h, normed) with h = residual + pending [B, T, hidden], and the rest of
  // the layer from h and normed. Activation checkpointing keeps only h and recomputes from input_norm(h, {}).
  std::pair<at::Tensor, at::Tensor> input_norm(const at::Tensor& residual, const at::Tensor& pending);
  std::pair<at::Tensor, at::Tensor> forward_normed(const at::Tensor& h, const at::Tensor& normed, const at::Tensor& cos,
                                                   const at::Tensor& sin, const AttentionMask& mask, KVCache* cache);
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  // Llama: post_attention_layernorm is the norm before the MLP. Gemma: it norms the attention output, and
  // pre_feedforward_layernorm / post_feedforward_layernorm norm the MLP's input and output (null elsewhere).
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};
  int64_t index;
};
TORCH_MODULE(DecoderLayer);

}  // namespace ft::model

// Building blocks of the decoder, each mirroring the transformers module of the same name so parameter names and
// numerics match Hugging Face checkpoints.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "model/activation_offload.h"
#include "model/args.h"
#include "model/attention.h"
#include "model/kernel_policy.h"
#include "model/linear.h"
#include "model/moe.h"
#include "model/ops.h"

namespace ft::model {

// What every layer of one forward reads besides its hidden state.
struct LayerContext {
  at::Tensor cos, sin;                   // [B, T, R] rotary tables in the compute dtype
  const AttentionMask* mask = nullptr;   // the layer kind's part of the batch's AttentionPlan
  KVCache* cache = nullptr;              // incremental decoding, else nullptr
  const KernelPolicy* policy = nullptr;  // the run's kernels
  std::vector<at::Tensor>* router_logits = nullptr;  // MoE layers append their router's logits [N, E], when given
  OffloadChain* offload = nullptr;  // checkpointed layers: offload their input (model.activation_offload), when given
};

// RMSNorm as transformers computes it: normalize in F32, cast back, then scale (Llama). With `unit_offset` (Gemma):
// normalize and scale by (1 + weight) in F32, then cast back; the weight starts at zero. The kernels: model/ops.h.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, bool unit_offset = false);
  at::Tensor forward(const at::Tensor& x, const KernelPolicy& policy);  // [..., dim] (ops::rms_norm)
  // The residual add before the norm: (h, norm(h)) for h = residual + delta [..., dim] (ops::add_rms_norm).
  std::pair<at::Tensor, at::Tensor> add_forward(const at::Tensor& residual, const at::Tensor& delta, bool gemm_input,
                                                const KernelPolicy& policy);
  NormSpec spec() const { return {weight, eps, unit_offset}; }
  at::Tensor weight;  // [dim]
  double eps;
  bool unit_offset;
};
TORCH_MODULE(RMSNorm);

// Rotary tables: inv_freq (with the config's rope scaling applied) and cos/sin for given positions.
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
  double scale_ = 1.0;            // longrope, yarn: cos and sin are multiplied by the attention factor
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelArgs& args);
  // x [B, T, hidden]; returns [B, T, hidden]. `layer_index`: this layer's slot in the KV cache.
  at::Tensor forward(const at::Tensor& x, const LayerContext& ctx, int64_t layer_index);
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Linear qkv_proj{nullptr};  // phi3 (ModelArgs::fused_projections): q, k, v in one weight; q/k/v_proj are null then
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // qwen3, gemma3: over each head's [D] before RoPE; else null
  int64_t num_heads, num_kv_heads, head_dim;
  AttentionScores scores;  // gemma: query_pre_attn_scalar^-1/2 and (gemma2) attn_logit_softcapping

 private:
  // q [B, T, H, D], k and v [B, T, Hkv, D]: projected, per-head normed (qwen3, gemma3) and rotated.
  std::array<at::Tensor, 3> project(const at::Tensor& x, const LayerContext& ctx);
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const ModelArgs& args);
  at::Tensor forward(const at::Tensor& x, const KernelPolicy& policy);  // [B, T, hidden]
  // The MLP as one FP8 training op (fp8_training_mlp) where every projection trains with tensorwise FP8 (no bias,
  // adapter or quantized weight) and its fast path takes them; undefined otherwise.
  at::Tensor fp8_forward(const at::Tensor& x, const KernelPolicy& policy);
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  Linear gate_up_proj{nullptr};  // phi3: gate and up in one weight (gate rows first); gate/up_proj are null then
  int64_t intermediate_size;
  bool gelu_tanh;  // gemma: GeGLU (tanh-approximate GELU of the gate) instead of SwiGLU
};
TORCH_MODULE(MLP);

// The residual stream travels between layers as a pair (residual, pending delta) whose sum is the hidden state, so
// that each norm adds the pending delta in its own kernel (RMSNormImpl::add_forward): the next layer's input norm,
// or the model's final norm, adds this layer's MLP output.
class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelArgs& args, int64_t index);
  // residual [B, T, hidden]; pending [B, T, hidden] or undefined (the first layer). The layer's input is
  // residual + pending; returns (residual, delta) [B, T, hidden] each, the layer's output being their sum.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& residual, const at::Tensor& pending,
                                            const LayerContext& ctx);
  // The two halves of forward: the input norm, (h, normed) with h = residual + pending [B, T, hidden], and the rest of
  // the layer from h and normed. Activation checkpointing keeps only h and recomputes from input_norm(h, {}).
  std::pair<at::Tensor, at::Tensor> input_norm(const at::Tensor& residual, const at::Tensor& pending,
                                               const KernelPolicy& policy);
  std::pair<at::Tensor, at::Tensor> forward_normed(const at::Tensor& h, const at::Tensor& normed,
                                                   const LayerContext& ctx);
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  SparseMoe moe{nullptr};  // qwen3_moe, mixtral (ModelArgs::moe_layer): in place of mlp, under the same name "mlp"
  // Llama: post_attention_layernorm is the norm before the MLP. Gemma: it norms the attention output, and
  // pre_feedforward_layernorm / post_feedforward_layernorm norm the MLP's input and output (null elsewhere).
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};
  int64_t index;
};
TORCH_MODULE(DecoderLayer);

}  // namespace ft::model

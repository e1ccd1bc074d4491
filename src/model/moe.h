// The sparse mixture-of-experts block of qwen3_moe and mixtral (transformers' Qwen3MoeSparseMoeBlock and
// MixtralSparseMoeBlock) under transformers 5's parameter names: mlp.gate.weight [E, hidden] (the router),
// mlp.experts.gate_up_proj [E, 2 I, hidden] (each expert's gate rows, then its up rows) and
// mlp.experts.down_proj [E, hidden, I]. The released checkpoints store one tensor per expert (experts.N.gate_proj,
// Mixtral's block_sparse_moe.experts.N.w1 ...); model/pretrained.cpp stacks them on load and splits them on save,
// as transformers' checkpoint conversion does.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "config/settings.h"
#include "model/args.h"
#include "model/kernel_policy.h"
#include "model/moe_experts.h"
#include "model/quantized_experts.h"

namespace ft::model {

// The router's choice for N tokens.
struct RouterChoice {
  at::Tensor logits;   // [N, E] in the compute dtype
  at::Tensor weights;  // [N, k]: the chosen experts' softmax probabilities (renormalised with norm_topk_prob);
                       // qwen3_moe: in the compute dtype, mixtral: F32 (as each family's router returns them)
  at::Tensor experts;  // I64 [N, k]: the chosen experts, most probable first
};

class MoeRouterImpl : public torch::nn::Module {
 public:
  explicit MoeRouterImpl(const ModelArgs& args);
  RouterChoice forward(const at::Tensor& x);  // x [N, hidden]
  at::Tensor weight;                          // [E, hidden]
  ops::ExpertAdapter lora;                    // LoRA on weight (one "expert"), when lora.a is defined (moe_lora.h)
  int64_t top_k;
  bool norm_topk_prob;
  bool weights_in_compute_dtype;  // qwen3_moe casts the kept probabilities to the logits' dtype; mixtral does not
};
TORCH_MODULE(MoeRouter);

class MoeExpertsImpl : public torch::nn::Module {
 public:
  explicit MoeExpertsImpl(const ModelArgs& args);
  // x [N, hidden] through each token's chosen experts, weighted and summed: [N, hidden] (ops::moe_experts).
  at::Tensor forward(const at::Tensor& x, const RouterChoice& choice, const KernelPolicy& policy);
  // Replaces the frozen weight `name` (gate_up_proj or down_proj) by the codes of `value` (its shape, on the device
  // the layer runs on) in `format`, standing for compute dtype `dtype` (model/quantized_experts.h). The dense
  // weight stops being a parameter and is dropped. Throws ft::Error for another name or shape, or a weight already
  // quantized.
  void quantize(const std::string& name, const at::Tensor& value, BaseQuantization format, at::ScalarType dtype);
  ops::ExpertWeight gate_up() const { return {gate_up_proj, gate_up_codes}; }
  ops::ExpertWeight down() const { return {down_proj, down_codes}; }
  int64_t quantized_numel() const;  // elements of the quantized weights (0 when dense)

  at::Tensor gate_up_proj;                                            // [E, 2 I, hidden]; undefined once quantized
  at::Tensor down_proj;                                               // [E, hidden, I]; undefined once quantized
  std::shared_ptr<const QuantizedExperts> gate_up_codes, down_codes;  // set once quantized
  ops::ExpertAdapter gate_up_lora, down_lora;  // LoRA on them, when .a is defined (model/moe_lora.h)
};
TORCH_MODULE(MoeExperts);

class SparseMoeImpl : public torch::nn::Module {
 public:
  explicit SparseMoeImpl(const ModelArgs& args);
  // x [B, T, hidden] -> [B, T, hidden]. Appends the router's logits [B * T, E] to `router_logits` when given (the
  // load-balancing loss reads them).
  at::Tensor forward(const at::Tensor& x, const KernelPolicy& policy, std::vector<at::Tensor>* router_logits);
  MoeRouter gate{nullptr};
  MoeExperts experts{nullptr};
  double jitter_noise;  // mixtral's router_jitter_noise, in training mode only
};
TORCH_MODULE(SparseMoe);

// transformers' load_balancing_loss_func without an attention mask (Switch Transformer's eqs. 4-6 over all layers
// at once): with f_e the fraction of the (token, k) choices that went to expert e and P_e the mean router
// probability of e, both over the tokens of every layer in `router_logits` ([N, E] each),
// num_experts * sum_e f_e * P_e. F32 []; differentiable in the logits (through P_e). Undefined when the list is
// empty.
at::Tensor load_balancing_loss(const std::vector<at::Tensor>& router_logits, int64_t num_experts, int64_t top_k);

}  // namespace ft::model

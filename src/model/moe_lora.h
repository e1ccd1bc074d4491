// LoRA on the experts and routers of mixture-of-experts models, as PEFT 0.21 adapts transformers 5's fused expert
// weights (LoraConfig.target_parameters, its ParamWrapper): lora.targets gate_up_proj and down_proj adapt every
// MoE layer's experts.gate_up_proj [E, 2 I, hidden] / experts.down_proj [E, hidden, I] with one A and B per expert
// (ops::ExpertAdapter's layout), gate the router's weight [E, hidden] as one matrix. PEFT's files name them
// mlp.experts.lora_A/B (mlp.experts.base_layer.lora_A/B for gate_up_proj when down_proj is adapted too: PEFT nests
// the two wrappers) and mlp.gate.lora_A/B.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "model/transformer.h"

namespace ft::model {

// The lora.targets that name MoE weights: gate_up_proj, down_proj, gate.
bool is_moe_target(const std::string& target);

// Adds an adapter (rank `rank`, scaling alpha / rank; A kaiming-uniform from `gen` as PEFT's nn.Linear init, B zeros,
// both F32 on the weight's device) to each MoE weight a target matches (the experts' weights at
// model.layers.N.mlp.experts.{gate_up_proj,down_proj}, the router at model.layers.N.mlp.gate, matched as PEFT matches
// target_modules); returns how many.
int64_t add_moe_adapters(Transformer& model, const std::vector<std::string>& targets, int64_t rank, double alpha,
                         at::Generator& gen);

// (PEFT's name, tensor) of every MoE adapter matrix, in layer order.
std::vector<std::pair<std::string, at::Tensor>> moe_adapter_tensors(const Transformer& model);

// PEFT's target_parameters for the adapters `model` holds: some of down_proj, gate.weight, gate_up_proj (sorted).
std::vector<std::string> moe_target_parameters(const Transformer& model);

// Every MoE adapter of `model` (the ops::ExpertAdapter it lives in), for AdaptersDisabled.
std::vector<ops::ExpertAdapter*> moe_adapters(Transformer& model);

// Folds each MoE adapter into its weight (W_e += scaling * B_e A_e) and removes it.
void merge_moe_adapters(Transformer& model);

}  // namespace ft::model

// How the released mixture-of-experts checkpoints store what model/moe.h holds as 3-D weights: one tensor per expert
// and projection, as transformers 5's checkpoint conversion reads them (and its save_pretrained writes them back).
//   qwen3_moe: model.layers.N.mlp.experts.E.{gate_proj,up_proj,down_proj}.weight, mlp.gate.weight
//   mixtral:   model.layers.N.block_sparse_moe.experts.E.{w1,w3,w2}.weight (gate, up, down),
//              model.layers.N.block_sparse_moe.gate.weight
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "model/args.h"

namespace ft::model {

// The stored tensors parameter `name` is assembled from: each group's tensors stacked along a new dim 0 (one per
// expert), the groups concatenated along dim 1 (gate_up_proj: the gate group, then the up group). {{name}} for a
// parameter stored as it is.
std::vector<std::vector<std::string>> stored_parts(const std::string& name, const ModelArgs& args);

// `value` of parameter `name` as the checkpoint stores it: the per-expert slices (views) under stored_parts' names,
// in expert order, gate before up; else {name, value}.
std::vector<std::pair<std::string, at::Tensor>> split_for_checkpoint(const std::string& name, const at::Tensor& value,
                                                                     const ModelArgs& args);

}  // namespace ft::model

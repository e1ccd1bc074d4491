// How released checkpoints name what the model holds (our names are transformers' *ForCausalLM module paths):
// - mixture-of-experts weights, which model/moe.h holds as 3-D tensors, stored one tensor per expert and projection,
//   as transformers 5's checkpoint conversion reads them (and its save_pretrained writes them back):
//     qwen3_moe: model.layers.N.mlp.experts.E.{gate_proj,up_proj,down_proj}.weight, mlp.gate.weight
//     mixtral:   model.layers.N.block_sparse_moe.experts.E.{w1,w3,w2}.weight (gate, up, down),
//                model.layers.N.block_sparse_moe.gate.weight
// - the language model of a multimodal checkpoint (ModelArgs::multimodal_type gemma3, Gemma3ForConditionalGeneration):
//     stored as language_model.model.* and language_model.lm_head.weight (the released files, and what transformers 5
//     writes), beside vision_tower.* and multi_modal_projector.*, which pass through unchanged; in memory (PEFT's
//     module paths, and the files transformers 5 writes with save_original_format=False) model.language_model.*,
//     model.vision_tower.*, model.multi_modal_projector.* and lm_head. Both are read; the released one is written.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "model/args.h"

namespace ft::model {

// The stored tensors parameter `name` is assembled from: each group's tensors stacked along a new dim 0 (one per
// expert), the groups concatenated along dim 1 (gate_up_proj: the gate group, then the up group). {{name}} for a
// parameter stored as it is, {{stored name}} for one stored under another name.
std::vector<std::vector<std::string>> stored_parts(const std::string& name, const ModelArgs& args);

// `value` of parameter `name` as the checkpoint stores it: the per-expert slices (views) under stored_parts' names,
// in expert order, gate before up; else {stored name, value}.
std::vector<std::pair<std::string, at::Tensor>> split_for_checkpoint(const std::string& name, const at::Tensor& value,
                                                                     const ModelArgs& args);

// Stored tensor `name` under the released layout's name: a multimodal checkpoint saved in transformers 5's
// in-memory layout (save_original_format=False, or a state_dict: model.language_model.*, model.vision_tower.*,
// model.multi_modal_projector.*, lm_head.weight) reads as the released one; other names are unchanged.
std::string released_name(const std::string& name, const ModelArgs& args);

// Whether stored tensor `name` belongs to a part of the checkpoint this model does not run (a multimodal
// checkpoint's vision tower and projector): read and written back unchanged.
bool passes_through(const std::string& name, const ModelArgs& args);

// Module `path` of the model (model.layers.0.self_attn.q_proj, lm_head) as transformers names it in memory, where
// PEFT's adapter keys and target_modules regexes point: the path itself, except in a multimodal model.
std::string transformers_module_path(const std::string& path, const ModelArgs& args);
// The inverse: transformers' module path (or a name or tail of one) as the model's.
std::string module_path_from_transformers(const std::string& path, const ModelArgs& args);
// A PEFT adapter key of a multimodal model saved with transformers 4.5x, whose modules were language_model.model.*,
// language_model.lm_head, vision_tower.* and multi_modal_projector.* (base_model.model.language_model.model.layers.0
// ...), as transformers 5 names it (base_model.model.model.language_model.layers.0...), which PEFT maps it to when
// loading; any other key as it is.
std::string adapter_key_from_transformers4(const std::string& key, const ModelArgs& args);

}  // namespace ft::model

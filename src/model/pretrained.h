// Hugging Face model directories <-> Transformer: config.json plus model.safetensors or shards with an index.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/settings.h"
#include "model/transformer.h"
#include "util/checksum.h"

namespace ft::model {

// What casting wider weights (F32 in the checkpoint, or drawn in F32) to a bf16/fp16 run dtype dropped, per parameter
// name: value - cast(value), in the run dtype. optimizer.kahan_summation starts its compensation there
// (optim::AdamW::start_compensation_at): bf16 weights plus compensation then hold the F32 values, and small updates
// move the bf16 weights as they move rounded F32 master weights, from the first step. Filled only when asked for,
// and only with what was dropped (nothing for a bf16 checkpoint read in bf16, nor for quantized projections).
using RoundingResiduals = std::map<std::string, at::Tensor>;

// Reads config.json and the weights of `dir` into a new model with parameters of `dtype` on `device`.
// Stored float tensors are cast to `dtype` (F32/F16/BF16 in any combination; logged once). Throws ft::Error naming
// the file and tensor for a missing tensor, an unexpected one, a shape mismatch or a non-float stored dtype.
// A tied model's checkpoint may still carry lm_head.weight (some releases do); it is ignored, as transformers does.
// `quantize` nf4: the decoder layers' projections and MoE expert weights are stored as NF4
// (LinearImpl::quantize_nf4, MoeExpertsImpl::quantize; bitsandbytes' block of 64, double-quantized absmax), fp8: as
// e4m3 with row scales (torchao's per-row float8); quantized one at a time on `device` as they are read;
// embeddings, norms, routers and the LM head stay in `dtype`. `residuals`, when given, gets what each cast dropped.
std::shared_ptr<Transformer> load_pretrained(const std::filesystem::path& dir, at::Device device, at::ScalarType dtype,
                                             BaseQuantization quantize = BaseQuantization::kNone,
                                             RoundingResiduals* residuals = nullptr);

// Copies the checkpoint's tensors into `model`'s existing parameters (same checks as load_pretrained).
void load_weights(Transformer& model, const std::filesystem::path& dir);

// transformers-style init, deterministic for `seed`: linear and embedding weights ~ N(0, std) (drawn in F32, then
// cast), biases 0, RMSNorm weights 1 (Gemma's 0). In place on the CPU when no device or dtype is given; else every
// base parameter gets new storage on `device` in `dtype`, drawn by that device's generator, so a model built from
// scratch is never written on the CPU and copied (a GPU's draws differ from the CPU's, each reproducible). LoRA
// parameters are left alone. With `quantize` nf4 or fp8 each quantizable weight is quantized as it is drawn and
// dropped (as load_pretrained does while reading), so the dense base never exists whole: the same draws, quantized.
// `residuals`, when given, gets what rounding the F32 draws to `dtype` dropped.
void init_weights(Transformer& model, double std, uint64_t seed, std::optional<c10::Device> device = std::nullopt,
                  std::optional<at::ScalarType> dtype = std::nullopt,
                  BaseQuantization quantize = BaseQuantization::kNone, RoundingResiduals* residuals = nullptr);

// The base parameters (no LoRA matrices, no token rows) in registration order, HF names: what save_pretrained
// writes.
std::vector<std::pair<std::string, at::Tensor>> base_parameters(const Transformer& model);

// A saved model directory taken from a model at one moment and written later by write_model_files, so that its
// tensors can be replaced by host copies and written while training goes on (ckpt::HostStaging): an HF model
// (pretrained_files) or a PEFT adapter (adapter_files in lora.h).
struct ModelFiles {
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // the names in the files, in write order
  ModelArgs args;                                           // config.json and generation_config.json of an HF model
  nlohmann::json adapter_config;                            // adapter_config.json; null for an HF model
};

// The base parameters and args of `model`, for save_pretrained.
ModelFiles pretrained_files(const Transformer& model);

// An HF model: config.json (torch_dtype = the tensors' dtype), generation_config.json (the special-token ids) and
// the weights: model.safetensors, or model-0000N-of-0000M.safetensors + model.safetensors.index.json when they
// exceed `shard_size_bytes` (<= 0: never shard). An adapter: adapter_model.safetensors and adapter_config.json,
// never sharded. `dir` is created if missing. Returns the digests of the weight files.
FileDigests write_model_files(const ModelFiles& files, const std::filesystem::path& dir, int64_t shard_size_bytes);

// write_model_files(pretrained_files(model)). LoRA adapters and token rows are not written (merge_lora first for a
// merged export).
void save_pretrained(const Transformer& model, const std::filesystem::path& dir, int64_t shard_size_bytes);

}  // namespace ft::model

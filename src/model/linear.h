// The projections of the decoder: nn.Linear with an optional LoRA adapter, and the groups of projections that read
// one input (q/k/v, gate/up), run as few GEMMs as their weights allow.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

#include "model/ops.h"
#include "quant/fp8.h"
#include "quant/fp8_cast.h"
#include "quant/nf4.h"

namespace ft::model {

// nn.Linear with an optional LoRA adapter (PEFT semantics: y = W x + b + (alpha/r) * B A dropout(x)).
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias);
  // [..., in] -> [..., out]: the base GEMM through ops::linear, and the adapter's dropout through the CUDA kernel
  // (model/lora_dropout.h) where the policy and the input allow.
  at::Tensor forward(const at::Tensor& x, const KernelPolicy& policy);
  // The base weight as ops::linear reads it: dense (with fp8_training's FP8 GEMMs where set), or the codes after
  // quantize_nf4 / quantize_fp8.
  LinearWeight gemm_weight() const;

  // Replaces the frozen weight by the NF4 codes of `dense` ([out, in], the values the weight is to hold, on the
  // device the layer runs on; the current weight's own values when undefined): quant::quantize_nf4 with
  // `blocksize` and double quantization, as bitsandbytes' Linear4bit. The dense weight stops being a parameter and
  // is dropped; GEMMs dequantize the codes to the compute dtype (autocast's, else `dtype`). The codes are no module
  // state (Module::to would cast their F32 absmax): they stay on the device they were made on.
  void quantize_nf4(const at::Tensor& dense, at::ScalarType dtype, int64_t blocksize);
  // The same with FP8 codes: quant::quantize_fp8_rows (e4m3, one scale per output row, as torchao); GEMMs run in
  // FP8 where the device has them (model/fp8_linear.h).
  void quantize_fp8(const at::Tensor& dense, at::ScalarType dtype);
  bool quantized() const { return nf4 != nullptr || fp8 != nullptr; }
  // Elements of the frozen quantized weight (0 when dense).
  int64_t quantized_numel() const;
  int64_t out_features() const;
  int64_t in_features() const;

  // Adds lora_A [r, in] (kaiming-uniform, as PEFT) and lora_B [out, r] (zeros), both F32, on the weight's device.
  void add_lora(int64_t rank, double alpha, double dropout, at::Generator& gen);
  bool has_lora() const { return lora_a.defined(); }
  // W += scaling * B A (in W's dtype), then drops the adapter. Throws ft::Error for an NF4 weight.
  void merge_lora();
  // Points weight (and bias, when defined) at other frozen tensors of the same values: views of a joint buffer
  // (join_frozen_weights).
  void replace_frozen(at::Tensor new_weight, at::Tensor new_bias);

  at::Tensor weight;  // [out, in]; undefined once quantized
  at::Tensor bias;    // [out] or undefined
  std::shared_ptr<const quant::Nf4Tensor> nf4;  // the frozen weight's NF4 codes [out, in], or null
  std::shared_ptr<const quant::Fp8Tensor> fp8;  // the frozen weight's FP8 codes [out, in], or null
  at::ScalarType quantized_dtype = at::kFloat;  // the dtype the quantized weight had
  Fp8Training fp8_training = Fp8Training::kOff;  // a dense weight's GEMMs in FP8 (train.fp8, enable_fp8_training)
  // Where the optimizer writes the weight's amax beside each step (tensorwise FP8 training), or null.
  std::shared_ptr<quant::KnownAmax> fp8_weight_amax;
  // F32 []: the weight's amax while fp8_weight_amax still describes the weight, else undefined.
  at::Tensor known_weight_amax() const;
  Nf4Compute nf4_compute = Nf4Compute::kDtype;   // the NF4 weight's GEMMs (model.nf4_compute, set_nf4_compute)
  at::Tensor lora_a;  // F32 [r, in] or undefined (registered as "lora_A")
  at::Tensor lora_b;  // F32 [out, r] or undefined (registered as "lora_B")
  double lora_scaling = 0.0;
  double lora_dropout = 0.0;
};
TORCH_MODULE(Linear);

// The outputs of several Linear layers on one input.
struct LinearGroupOutput {
  std::vector<at::Tensor> outputs;  // per layer: [..., out_i]
  at::Tensor joint;                 // [N, sum out_i] (N = rows of x) when one GEMM made them all, else undefined
};

// The entry point of projections that read one input: the outputs of `layers` (all [out_i, in] weights of one dtype,
// all with or all without bias) on the same input x [..., in]. With policy.group_gemms: x cast once to the compute
// dtype (autocast's, else the weights'); one GEMM over the concatenated weights when they need a cast anyway (F32
// weights under autocast) or are row blocks of one buffer (join_frozen_weights), else one GEMM per layer on the
// shared input; one GEMM over the concatenated lora_A of the adapted layers when no adapter dropout is active; the
// adapters' B GEMMs add into the outputs in place. Otherwise, or when the layers do not fit the rule, each layer's
// own forward. Both agree up to the rounding of the GEMMs.
LinearGroupOutput linear_group(const at::Tensor& x, const std::vector<LinearImpl*>& layers,
                               const KernelPolicy& policy);

// Moves the frozen weights of `layers` into one [sum out_i, in] buffer, each layer's weight (and bias) becoming a row
// block of it, so that linear_group runs a frozen base (LoRA) as one GEMM per direction without concatenating the
// weights every step: the input gradient then comes out of one GEMM instead of one per layer plus the sums. Values
// are unchanged. FP8 layers join their codes and scales the same way. Returns false, changing nothing, unless every
// weight is frozen, contiguous, and of one format, dtype, device and input size (biases: all or none).
bool join_frozen_weights(const std::vector<LinearImpl*>& layers);

}  // namespace ft::model

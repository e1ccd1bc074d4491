// The dtypes of one training run, resolved once from train.precision, model.dtype and distributed.reduce_dtype, so
// that the model, the forward, the loss, the loss scaler and the gradient all-reduce read one decision.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "config/config.h"
#include "model/mode_guards.h"

namespace ft::train {

struct PrecisionPolicy {
  at::ScalarType param = at::kFloat;              // the model's parameters (a LoRA base: model.dtype)
  bool autocast = false;                          // bf16 / fp16 autocast around the forward
  at::ScalarType autocast_dtype = at::kBFloat16;  // the autocast dtype when `autocast`
  at::ScalarType compute = at::kFloat;            // of the matmuls: the autocast dtype, else `param`
  at::ScalarType reduce = at::kFloat;             // gradients on the wire of the all-reduce
  bool loss_scaling = false;                      // fp16: dynamic loss scaling (optim::GradScaler)

  // "bf16 autocast over fp32 parameters, fp32 gradient reduction" for the log.
  std::string describe() const;
  // Autocast as the policy says, on `device` until the guard's scope ends: around every forward of the run.
  model::AutocastGuard autocast_on(c10::DeviceType device) const { return {device, autocast_dtype, autocast}; }
};

// train.precision: fp32 (all F32), bf16 (bf16 autocast over F32 parameters), fp16 (fp16 autocast, loss scaling),
// bf16-pure (bf16 parameters and compute); model.dtype bf16 keeps the (frozen) parameters in bf16 under any of them.
// The config is validated already (config/validate.cpp).
PrecisionPolicy resolve_precision(const Config& cfg);

// Why the FP8 GEMMs of `setting` (a frozen FP8 base, "model.quantize: fp8", or FP8 training, "train.fp8: ...")
// would not run on a CUDA device of compute capability `capability` (major * 10 + minor) under `policy`, with or
// without our `kernels`: an F32 emulation there would be much slower than the bf16 GEMMs it replaces, so the run
// refuses. Empty when they run.
std::string fp8_gemm_refusal(const std::string& setting, const PrecisionPolicy& policy, int capability, bool kernels);

}  // namespace ft::train

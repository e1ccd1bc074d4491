#include "train/precision.h"

#include "util/fmt.h"

namespace ft::train {

PrecisionPolicy resolve_precision(const Config& cfg) {
  const Precision p = cfg.train.precision;
  PrecisionPolicy out;
  out.param = p == Precision::kBf16Pure || cfg.model.dtype == ModelDType::kBf16 ? at::kBFloat16 : at::kFloat;
  out.autocast = p == Precision::kBf16 || p == Precision::kFp16;
  out.autocast_dtype = p == Precision::kFp16 ? at::kHalf : at::kBFloat16;
  out.compute = out.autocast ? out.autocast_dtype : out.param;
  out.reduce = cfg.distributed.reduce_dtype == ReduceDType::kBf16 ? at::kBFloat16 : at::kFloat;
  out.loss_scaling = p == Precision::kFp16;
  return out;
}

std::string PrecisionPolicy::describe() const {
  return fmt::format("{} parameters, {} compute{}{}, {} gradient reduction", c10::toString(param),
                     c10::toString(compute), autocast ? " (autocast)" : "",
                     loss_scaling ? ", dynamic loss scaling" : "", c10::toString(reduce));
}

std::string fp8_gemm_refusal(const std::string& setting, const PrecisionPolicy& policy, int capability, bool kernels) {
  if (capability < 89) {
    return fmt::format(
        "{} needs FP8 tensor cores (compute capability 8.9 or later: Ada, Hopper, Blackwell), but the GPU has "
        "{}.{}",
        setting, capability / 10, capability % 10);
  }
  if (policy.compute != at::kBFloat16) {
    return fmt::format("{} runs its GEMMs with BF16 results, but the run computes in {}", setting,
                       c10::toString(policy.compute));
  }
  if (!kernels) {
    return setting +
           " quantizes the activations with our CUDA kernels, which train.fused_kernels: false (or a build without "
           "them) turns off";
  }
  return {};
}

}  // namespace ft::train

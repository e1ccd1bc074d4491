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

}  // namespace ft::train

// What the training step minimises. An Objective turns one micro-batch into a summed loss and says over how many
// units it summed (target tokens for next-token prediction; a preference objective would count pairs). The step
// divides every micro-batch's sum by the units of the whole optimizer step on all ranks (docs/internals.md, "the
// loss normalised over an optimizer step's tokens"), and evaluation reports the sum over the units of the eval set,
// so a new objective is a new subclass and its builder case: the loop does not change.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "config/config.h"
#include "model/kernel_policy.h"
#include "train/precision.h"

namespace ft::data {
struct Batch;
}
namespace ft::model {
class Transformer;
}

namespace ft::train {

class Objective {
 public:
  virtual ~Objective() = default;
  // The units `loss_sum` of this batch sums over, counted on the host.
  virtual int64_t units(const data::Batch& batch) const = 0;
  // F32 [] the loss of `batch` summed over its units, with autograd history unless grad mode is off. The batch may
  // still be on the host: the objective moves what it reads to the model's device.
  virtual at::Tensor loss_sum(model::Transformer& model, const data::Batch& batch) const = 0;
};

// Next-token cross-entropy over the labelled positions (labels != -100): the chunked linear + cross-entropy when
// `kernels.fused`, else the logits and ATen's cross-entropy.
class NextTokenObjective final : public Objective {
 public:
  NextTokenObjective(PrecisionPolicy precision, model::KernelPolicy kernels)
      : precision_(precision), kernels_(std::move(kernels)) {}
  int64_t units(const data::Batch& batch) const override;
  at::Tensor loss_sum(model::Transformer& model, const data::Batch& batch) const override;

 private:
  PrecisionPolicy precision_;
  model::KernelPolicy kernels_;
};

// The objective of a run (today: next-token prediction).
std::unique_ptr<Objective> build_objective(const Config& cfg, const PrecisionPolicy& precision,
                                           const model::KernelPolicy& kernels);

}  // namespace ft::train

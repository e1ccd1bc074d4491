// What the training step minimises. An Objective turns one micro-batch into a summed loss and says over how many
// units it summed (target tokens for next-token prediction, pairs for the preference objectives). The step divides
// every micro-batch's sum by the units of the whole optimizer step on all ranks (docs/internals.md, "the loss
// normalised over an optimizer step's tokens"), and evaluation reports the sum over the units of the eval set, so a
// new objective is a new subclass and its builder case: the loop does not change.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "config/config.h"
#include "metrics/meters.h"
#include "model/attention.h"
#include "model/kernel_policy.h"
#include "train/precision.h"

namespace ft::tok {
class Tokenizer;
}
namespace ft::data {
struct Batch;
struct CollateOptions;
class PreferenceDataset;
}  // namespace ft::data
namespace ft::model {
class Transformer;
}

namespace ft::train {

struct RunContext;

class Objective {
 public:
  virtual ~Objective() = default;
  // The units `loss_sum` of this batch sums over, counted on the host.
  virtual int64_t units(const data::Batch& batch) const = 0;
  // F32 [] the loss of `batch` summed over its units, with autograd history unless grad mode is off. The batch may
  // still be on the host: the objective moves what it reads to the model's device. With `metrics`, the
  // objective's own metrics of the batch (sums over its units, same names in the same order on every call) are
  // added to it.
  at::Tensor loss_sum(model::Transformer& model, const data::Batch& batch,
                      metrics::MetricSums* metrics = nullptr) const {
    return compute(model, batch, metrics);
  }
  // Work done on a set of preference pairs before a loader draws from it, with `model` as training starts: the
  // preference objectives' precomputed reference log-probs (preference.precompute_ref_logps). `options` and
  // `pairs_per_batch` are the run's batch layout. Nothing for the other objectives.
  virtual void prepare_pairs(model::Transformer& /*model*/, data::PreferenceDataset& /*pairs*/,
                             const data::CollateOptions& /*options*/, int64_t /*pairs_per_batch*/,
                             const RunContext& /*ctx*/) const {}

 protected:
  virtual at::Tensor compute(model::Transformer& model, const data::Batch& batch,
                             metrics::MetricSums* metrics) const = 0;
};

// A micro-batch's model inputs on the device.
struct DeviceBatch {
  at::Tensor input_ids;  // I64 [B, T]
  at::Tensor positions;  // I64 [B, T]
  at::Tensor segments;   // I32 [B, T] when packing, else undefined
  model::PackedPieces packed;
  static DeviceBatch of(const data::Batch& batch, c10::Device device);
};

// The cross-entropy of `model` on `inputs` at the flattened positions `rows` (I64 [n] into [B * T], on the device)
// against `labels` (I64 [n], the target of each of those positions), F32 [n], with autograd history unless grad mode
// is off. Only those rows go through the LM head: with the chunked linear + cross-entropy when `kernels.fused` (the
// logits never exist), else the logits of every position and ATen's cross-entropy on the selected ones.
at::Tensor token_losses(model::Transformer& model, const DeviceBatch& inputs, const at::Tensor& rows,
                        const at::Tensor& labels, const PrecisionPolicy& precision, const model::KernelPolicy& kernels);

// Next-token cross-entropy over the labelled positions (labels != -100): the chunked linear + cross-entropy when
// `kernels.fused`, else the logits and ATen's cross-entropy; plus an MoE model's router load-balancing loss.
class NextTokenObjective final : public Objective {
 public:
  // `router_aux_loss`: whether an MoE model adds its router's load-balancing loss (train/router_aux_loss.h).
  NextTokenObjective(PrecisionPolicy precision, model::KernelPolicy kernels,
                     RouterAuxLoss router_aux_loss = RouterAuxLoss::kAuto)
      : precision_(precision), kernels_(std::move(kernels)), router_aux_loss_(router_aux_loss) {}
  int64_t units(const data::Batch& batch) const override;

 protected:
  at::Tensor compute(model::Transformer& model, const data::Batch& batch, metrics::MetricSums* metrics) const override;

 private:
  PrecisionPolicy precision_;
  model::KernelPolicy kernels_;
  RouterAuxLoss router_aux_loss_;
};

// The objective of a run: next-token prediction (train.objective sft), or a preference objective
// (train/preference_objective.h). DPO and IPO of a full fine-tune need a frozen reference model: built here like
// the run's model (build_model), frozen, in eval mode.
std::unique_ptr<Objective> build_objective(const Config& cfg, const PrecisionPolicy& precision,
                                           const model::KernelPolicy& kernels, const tok::Tokenizer& tokenizer,
                                           const RunContext& ctx);

}  // namespace ft::train

#include "train/train_step.h"

#include <optional>

#include "data/batch.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "model/transformer.h"
#include "optim/clip.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "train/objective.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::train {

TrainStep::TrainStep(const Config& cfg, RunContext ctx, ModelParts& model, OptimizerParts& optim,
                     std::unique_ptr<Objective> objective, std::unique_ptr<optim::GradScaler> scaler,
                     std::unique_ptr<dist::DistributedDataParallel> ddp)
    : cfg_(cfg),
      ctx_(std::move(ctx)),
      model_(model),
      optim_(optim),
      objective_(std::move(objective)),
      scaler_(std::move(scaler)),
      ddp_(std::move(ddp)),
      non_finite_(cfg.train.max_nan_skips, /*scaler_counts=*/scaler_->enabled()) {}

TrainStep::~TrainStep() = default;

StepOutput TrainStep::run(const std::vector<data::Batch>& batches, int64_t step) {
  StepOutput out;
  int64_t units = 0, tokens = 0, positions = 0;  // this rank's
  for (const auto& batch : batches) {
    units += objective_->units(batch);
    tokens += batch.num_target_tokens;
    positions += batch.input_ids.numel();
  }
  // One collective for the step's counts over all ranks.
  const auto global = dist::all_reduce_sum(
      *ctx_.comm, {static_cast<double>(units), static_cast<double>(tokens), static_cast<double>(positions)});
  out.global_units = static_cast<int64_t>(global[0]);
  out.global_tokens = static_cast<int64_t>(global[1]);
  out.global_positions = static_cast<int64_t>(global[2]);
  // DDP sums gradients over ranks (GradReduction::kSum), which with this normalisation is the single-process gradient.
  forward_backward(batches, 1.0 / std::max<double>(1.0, global[0]), out);
  update(out);
  non_finite_.add(step, out.skipped);
  return out;
}

void TrainStep::forward_backward(const std::vector<data::Batch>& batches, double loss_factor, StepOutput& out) {
  out.loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(ctx_.device));
  for (size_t i = 0; i < batches.size(); ++i) {
    // Gradients of accumulation micro-steps stay local; the last one all-reduces the accumulated sum.
    if (ddp_) ddp_->prepare_for_forward(/*sync=*/i + 1 == batches.size());
    metrics::MetricSums batch_metrics;
    const at::Tensor loss_sum = objective_->loss_sum(*model_.model, batches[i], &batch_metrics);
    const at::Tensor loss = scaler_->scale(loss_sum * loss_factor);
    if (ddp_) {
      ddp_->backward(loss);
    } else {
      loss.backward();
    }
    out.loss_sum += loss_sum.detach();
    metrics::add_metric_sums(out.metric_sums, batch_metrics);
  }
}

void TrainStep::update(StepOutput& out) {
  std::vector<at::Tensor> grads;
  grads.reserve(model_.trainable.size());
  for (auto& [name, param] : model_.trainable) {
    if (param.grad().defined()) grads.push_back(param.grad());
  }
  // The global norm is computed from the all-reduced gradients, so every rank agrees on it.
  auto [grad_norm, skipped] = clip_and_step(grads, cfg_.train.grad_clip, *scaler_, *optim_.optimizer);
  out.grad_norm = std::move(grad_norm);
  out.skipped = std::move(skipped);
  if (!optim_.zero_owners.empty()) {
    std::vector<at::Tensor> params;
    params.reserve(model_.trainable.size());
    for (const auto& [name, param] : model_.trainable) params.push_back(param);
    dist::broadcast_from_owners(*ctx_.comm, params, optim_.zero_owners);
  }
  if (scaler_->enabled()) scaler_->update();
  for (auto& [name, param] : model_.trainable) param.mutable_grad() = at::Tensor();  // the optimizer may own only some
}

ClippedUpdate clip_and_step(const std::vector<at::Tensor>& grads, double grad_clip, optim::GradScaler& scaler,
                            optim::AdamW& optimizer) {
  // A non-finite norm (from a NaN/Inf loss or gradient) skips the step inside the fused kernel through found_inf,
  // without a host sync; fp16 adds the scaler's check of the unscaled gradients.
  at::Tensor found_inf;  // F32 [] 0 or 1
  if (auto scaler_inf = scaler.unscale_(grads)) found_inf = *scaler_inf;
  // The optimizer applies the clipping as it reads each gradient (one pass over them fewer).
  optim::ClipDivisor clip = optim::clip_divisor(grads, grad_clip);
  ClippedUpdate out;
  out.grad_norm = std::move(clip.norm);
  out.skipped = at::logical_not(at::isfinite(out.grad_norm)).to(at::kFloat);
  found_inf = found_inf.defined() ? at::maximum(found_inf, out.skipped) : out.skipped;
  optimizer.step(clip.divisor.defined() ? std::optional<at::Tensor>(clip.divisor) : std::nullopt, found_inf);
  return out;
}

void NonFiniteSteps::check(int64_t& nan_skips) {
  if (scaler_counts_) {
    pending_.clear();
    return;
  }
  std::optional<int64_t> first_bad;
  for (const auto& [step, flag] : pending_) {
    if (flag.item<float>() == 0.0f) continue;
    ++nan_skips;
    if (!first_bad) first_bad = step;
    FT_LOG_WARN("step {}: non-finite loss or gradient norm; the update was skipped", step);
  }
  pending_.clear();
  if (first_bad && nan_skips > max_skips_) {
    throw Error(fmt::format("non-finite loss at step {} ({} step(s) skipped so far, train.max_nan_skips={}); the "
                            "weights were not updated by those steps and no checkpoint was written after them",
                            *first_bad, nan_skips, max_skips_),
                "lower optimizer.lr, keep train.grad_clip on, check the data, or raise train.max_nan_skips to "
                "tolerate rare spikes");
  }
}

}  // namespace ft::train

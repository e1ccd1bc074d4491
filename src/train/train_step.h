// One optimizer step of `finetune train`: the micro-batches of the step through the objective (forward, the scaled
// backward, DDP's gradient all-reduce on the last one), the global gradient norm and clipping, the fused AdamW step
// (which skips a non-finite update on the device, without a host sync), ZeRO-1's broadcast of the updated
// parameters, and the loss scaler's update. Owns the objective, the loss scaler, the DDP engine and the count of
// skipped updates.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "config/config.h"
#include "metrics/meters.h"
#include "train/build.h"

namespace ft::data {
struct Batch;
}

namespace ft::train {

class Objective;

// What a step leaves for the loop: tensors stay on the device until a log line reads them.
struct StepOutput {
  at::Tensor loss_sum;              // F32 [] this rank's loss summed over its units
  metrics::MetricSums metric_sums;  // the objective's own metrics, this rank's sums
  at::Tensor grad_norm;             // F32 [] global gradient norm before clipping
  at::Tensor skipped;               // F32 [] 1 when the update was skipped (non-finite loss or gradient norm)
  int64_t global_units = 0;         // the objective's units of the step on all ranks (target tokens, or pairs)
  int64_t global_tokens = 0;        // target tokens of the step on all ranks
  int64_t global_positions = 0;     // token positions of the step on all ranks
  double data_wait_s = 0.0;         // time the loop waited for the batches
};

// The steps whose update was skipped for a non-finite loss or gradient norm: flagged on the device at every step,
// read once per log interval (one host sync), counted into TrainState::nan_skips, and the run stopped past
// train.max_nan_skips. Under fp16 the loss scaler owns overflow handling and counts its own skips.
class NonFiniteSteps {
 public:
  NonFiniteSteps(int64_t max_skips, bool scaler_counts) : max_skips_(max_skips), scaler_counts_(scaler_counts) {}
  void add(int64_t step, at::Tensor skipped) { pending_.emplace_back(step, std::move(skipped)); }
  // Reads the pending flags into `nan_skips`; throws ft::Error when they exceed train.max_nan_skips.
  void check(int64_t& nan_skips);

 private:
  int64_t max_skips_;
  bool scaler_counts_;
  std::vector<std::pair<int64_t, at::Tensor>> pending_;  // (step, F32 [] 1 if skipped) not yet read
};

// The update after a step's gradients: `scaler` unscales them (fp16; a disabled scaler does nothing), their global
// norm (the norm before clipping) clips them to `grad_clip` (0: off) inside `optimizer`'s step (its grad_scale; the
// gradients are left divided or not, as each step path leaves them: nothing reads them after), skipping the update
// on the device when the norm is not finite or the scaler found an inf. `skipped` is F32 [] 1 when the norm was not
// finite. The caller updates the scaler.
struct ClippedUpdate {
  at::Tensor grad_norm;  // F32 []
  at::Tensor skipped;    // F32 []
};
ClippedUpdate clip_and_step(const std::vector<at::Tensor>& grads, double grad_clip, optim::GradScaler& scaler,
                            optim::AdamW& optimizer);

class TrainStep {
 public:
  // `model` and `optim` are the Trainer's; they outlive the step.
  TrainStep(const Config& cfg, RunContext ctx, ModelParts& model, OptimizerParts& optim,
            std::unique_ptr<Objective> objective, std::unique_ptr<optim::GradScaler> scaler,
            std::unique_ptr<dist::DistributedDataParallel> ddp);
  ~TrainStep();

  // Step number `step` (1-based) over `batches` (train.grad_accum_steps micro-batches of this rank); the loss is
  // normalised by the step's units on all ranks, so accumulation and data parallelism give the update of one big
  // batch. A skipped update is flagged in non_finite() under `step`.
  StepOutput run(const std::vector<data::Batch>& batches, int64_t step);

  Objective& objective() { return *objective_; }
  optim::GradScaler& scaler() { return *scaler_; }
  NonFiniteSteps& non_finite() { return non_finite_; }
  dist::DistributedDataParallel* ddp() { return ddp_.get(); }  // null on a single process

 private:
  // Sums every micro-batch's loss and metrics into `out` while accumulating the gradients.
  void forward_backward(const std::vector<data::Batch>& batches, double loss_factor, StepOutput& out);
  // Clips, steps the optimizer (skipping a non-finite update) and updates the scaler; sets out.grad_norm and
  // out.skipped.
  void update(StepOutput& out);

  const Config& cfg_;
  const RunContext ctx_;
  ModelParts& model_;
  OptimizerParts& optim_;
  std::unique_ptr<Objective> objective_;
  std::unique_ptr<optim::GradScaler> scaler_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;  // null on a single process
  NonFiniteSteps non_finite_;                           // the skipped updates not read yet
};

}  // namespace ft::train

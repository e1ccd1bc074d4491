// Assembling the parts (train/build.h), the step and the loop. Evaluation lives in loop_eval.cpp, checkpoints in
// loop_checkpoint.cpp.
#include "train/trainer.h"

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/checkpoint_store.h"
#include "ckpt/checkpoint_writer.h"
#include "config/loader.h"
#include "data/batch.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "dist/env.h"
#include "dist/zero.h"
#include "metrics/meters.h"
#include "metrics/metrics.h"
#include "metrics/mfu.h"
#include "metrics/profiler.h"
#include "metrics/record.h"
#include "model/mode_guards.h"
#include "model/pretrained.h"
#include "model/transformer.h"
#include "optim/clip.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "train/objective.h"
#include "train/schedule.h"
#include "util/fmt.h"
#include "util/process.h"
#include "util/signals.h"

#ifdef FT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ft::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Turns an out-of-memory error (CUDA's OutOfMemoryError, or the CPU allocator's failure) into advice in the user's
// own settings.
[[noreturn]] void rethrow_oom(const Config& cfg, c10::Device device, const std::string& what) {
  throw Error(
      fmt::format("out of {} memory during the training step (train.micro_batch_size={}, data.seq_len={}, "
                  "train.precision={}): {}",
                  device.is_cuda() ? "GPU" : "CPU", cfg.train.micro_batch_size, cfg.data.seq_len,
                  name_of(cfg.train.precision),
                  what.substr(0, what.find('\n'))),
      "lower train.micro_batch_size (raise train.grad_accum_steps to keep the batch), set "
      "model.activation_checkpointing=true, use train.precision=bf16, or train LoRA adapters (lora.enabled=true)");
}

// LibTorch's CPU allocator reports a failed allocation as a plain c10::Error.
bool is_cpu_allocation_failure(const c10::Error& e) {
  return std::string(e.what_without_backtrace()).find("DefaultCPUAllocator: can't allocate memory") !=
         std::string::npos;
}

}  // namespace

Trainer::Trainer(Config config, RunContext ctx, std::function<void()> accepted)
    : cfg_(std::move(config)),
      resolved_yaml_(config::to_yaml(cfg_)),
      accepted_(std::move(accepted)),
      ctx_(std::move(ctx)),
      run_dir_(cfg_.run.output_dir),
      precision_(resolve_precision(cfg_)),
      kernels_(model::KernelPolicy::resolve(cfg_.train.fused_kernels, ctx_.device, precision_.compute)) {
  const auto model_start = Clock::now();
  tokenizer_ = build_tokenizer(cfg_);
  model_ = build_model(cfg_, *tokenizer_, precision_, ctx_);
  model_.model->set_kernel_policy(kernels_);
  objective_ = build_objective(cfg_, precision_, kernels_, *tokenizer_, ctx_);
  setup_times_.model_s = seconds_since(model_start);
  const auto data_start = Clock::now();
  data_ = build_data(cfg_, *tokenizer_, ctx_);
  setup_times_.data_s = seconds_since(data_start);
  optim_ = build_optimizer(cfg_, model_.trainable, data_.total_steps, ctx_);
  checkpoints_ = build_checkpoints(cfg_, ctx_, !optim_.zero_owners.empty());
  scaler_ = build_scaler(cfg_, precision_, ctx_.device);
  metrics_ = build_metrics(cfg_, data_.total_steps, ctx_.rank);
  profiler_ = build_profiler(cfg_, ctx_);
  ddp_ = build_ddp(cfg_, model_.trainable, precision_, ctx_);
  // What a checkpoint saves besides weights and optimizer state (trainer_state.json, rng.safetensors).
  state_parts_ = std::make_unique<ckpt::CheckpointManager>(ctx_.comm, ctx_.rank);
  state_parts_->add_shared("progress", progress_);
  state_parts_->add_shared("scaler", *scaler_);
  state_parts_->add_per_rank("loader", *data_.train_loader);

  FT_LOG_INFO("precision: {}", precision_.describe());
  FT_LOG_INFO("kernels: {}", model_.model->kernel_summary(cfg_.data.packing));
}

Trainer::~Trainer() = default;

std::vector<double> Trainer::all_reduce_sum(std::vector<double> values) const {
  if (ctx_.world_size == 1) return values;
  std::vector<at::Tensor> t{at::tensor(values, at::TensorOptions().dtype(at::kDouble))};
  ctx_.comm->all_reduce_(t, dist::ReduceOp::kSum);
  const auto summed = t[0].cpu();
  return std::vector<double>(summed.data_ptr<double>(), summed.data_ptr<double>() + summed.numel());
}

double Trainer::all_reduce_sum(double value) const {
  return all_reduce_sum(std::vector<double>{value})[0];
}

bool Trainer::any_rank(bool flag) const {
  return all_reduce_sum(flag ? 1.0 : 0.0) > 0.0;
}

data::Batch Trainer::next_batch(double& wait_s) {
  const auto start = Clock::now();
  auto batch = data_.train_loader->next();
  if (!batch) {  // end of an epoch: the loader starts the next one on the following call
    ++progress_.epoch;
    batch = data_.train_loader->next();
    FT_CHECK(batch.has_value(), "the training data yields no batch; is data.train empty after filtering?");
  }
  wait_s += seconds_since(start);
  return std::move(*batch);
}

Trainer::StepOutput Trainer::train_step() {
  StepOutput out;
  std::vector<data::Batch> batches;
  batches.reserve(static_cast<size_t>(cfg_.train.grad_accum_steps));
  int64_t units = 0, tokens = 0, positions = 0;  // this rank's
  for (int64_t i = 0; i < cfg_.train.grad_accum_steps; ++i) {
    batches.push_back(next_batch(out.data_wait_s));
    units += objective_->units(batches.back());
    tokens += batches.back().num_target_tokens;
    positions += batches.back().input_ids.numel();
  }
  // The loss is normalised by the objective's units (target tokens, or pairs) of the whole optimizer step on all
  // ranks, so accumulation and data parallelism give the same update as one big batch. One collective for the
  // step's counts over all ranks.
  const auto global =
      all_reduce_sum({static_cast<double>(units), static_cast<double>(tokens), static_cast<double>(positions)});
  out.global_units = static_cast<int64_t>(global[0]);
  out.global_tokens = static_cast<int64_t>(global[1]);
  out.global_positions = static_cast<int64_t>(global[2]);
  // DDP sums gradients over ranks (GradReduction::kSum), which with this normalisation is the single-process gradient.
  const double loss_factor = 1.0 / std::max<double>(1.0, global[0]);

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

  std::vector<at::Tensor> grads;
  grads.reserve(model_.trainable.size());
  for (auto& [name, param] : model_.trainable) {
    if (param.grad().defined()) grads.push_back(param.grad());
  }
  // The global norm is computed from the all-reduced gradients, so every rank agrees on it. A non-finite norm
  // (from a NaN/Inf loss or gradient) skips the step inside the fused kernel through found_inf, without a host sync;
  // fp16 adds the scaler's check of the unscaled gradients.
  at::Tensor found_inf;  // F32 [] 0 or 1
  if (auto scaler_inf = scaler_->unscale_(grads)) found_inf = *scaler_inf;
  out.grad_norm = optim::clip_grad_norm_(grads, cfg_.train.grad_clip);
  const at::Tensor bad_norm = at::logical_not(at::isfinite(out.grad_norm)).to(at::kFloat);
  found_inf = found_inf.defined() ? at::maximum(found_inf, bad_norm) : bad_norm;
  optim_.optimizer->step(std::nullopt, found_inf);
  if (!optim_.zero_owners.empty()) {
    std::vector<at::Tensor> params;
    params.reserve(model_.trainable.size());
    for (const auto& [name, param] : model_.trainable) params.push_back(param);
    dist::broadcast_from_owners(*ctx_.comm, params, optim_.zero_owners);
  }
  if (scaler_->enabled()) scaler_->update();
  for (auto& [name, param] : model_.trainable) param.mutable_grad() = at::Tensor();  // the optimizer may own only some
  pending_skips_.emplace_back(progress_.step + 1, bad_norm);
  return out;
}

ExitCode Trainer::run() {
  const bool resumed = try_resume();
  if (ctx_.rank == 0 && accepted_) accepted_();
  if (!resumed) {
    FT_LOG_INFO("starting a new run in {}", run_dir_.string());
  } else if (progress_.step >= data_.total_steps && final_model_is_current()) {
    FT_LOG_INFO("the run is complete: step {} of {}; the final {} is in {} (raise train.max_steps to train further)",
                progress_.step, data_.total_steps, cfg_.lora.enabled ? "adapter" : "model", final_model_dir().string());
    return ExitCode::kOk;
  }
  FT_LOG_INFO("training {} steps: micro_batch_size {} x grad_accum_steps {} x world_size {}, seq_len {}, {}",
              data_.total_steps, cfg_.train.micro_batch_size, cfg_.train.grad_accum_steps, ctx_.world_size,
              cfg_.data.seq_len, name_of(cfg_.train.precision));

  const auto schedule = LoopSchedule::from_config(cfg_, data_.total_steps);
  const auto run_start = Clock::now();
  const double setup_s = process::seconds_since_start();
  metrics::LogWindow window(ctx_.device);  // the steps since the last log line
  bool interrupted = false;
  bool first_step_logged = false;

  while (progress_.step < data_.total_steps) {
    const auto step_start = Clock::now();
    const double lr = optim_.schedule->lr_at(progress_.step);
    optim_.optimizer->set_lr(lr);
    StepOutput out;
    profiler_->before_step(progress_.step + 1);
    try {
      out = train_step();
    } catch (const c10::OutOfMemoryError& e) {
      rethrow_oom(cfg_, ctx_.device, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      if (is_cpu_allocation_failure(e)) rethrow_oom(cfg_, ctx_.device, e.what_without_backtrace());
      throw;
    }
    ++progress_.step;
    if (!first_step_logged) {
      first_step_logged = true;
      log_first_step(setup_s, seconds_since(run_start));
      if (schedule.checkpoints_before_the_end()) {  // the optimizer state exists now: its host copy can be made
        model::ModelFiles files;
        checkpoints_->prepare(checkpoint_tensors(files));
      }
    }
    profiler_->after_step(progress_.step);
    progress_.tokens_seen += out.global_tokens;
    window.add_step({out.global_units, out.global_tokens, out.global_positions, out.loss_sum, out.metric_sums,
                     seconds_since(step_start), out.data_wait_s});

    if (schedule.log_at(progress_.step)) {
      check_non_finite();  // host sync: once per log interval
      const metrics::TrainRecord record = train_record(window, out, lr);
      if (ctx_.rank == 0) {
        const nlohmann::json fields = record.to_json();
        metrics_->log(metrics::kTrainEvent, progress_.step, fields);
        metrics_->progress(progress_.step, fields);
      }
      window.reset();
    }
    if (ctx_.rank == 0) metrics_->tick(progress_.step);
    if (schedule.eval_at(progress_.step)) evaluate();
    if (schedule.checkpoint_at(progress_.step)) save_checkpoint();
    checkpoints_->rethrow_failure();  // a background save that failed stops the run as a synchronous one would
    if (any_rank(signals::stop_requested())) {
      FT_LOG_WARN("stop requested by signal {}: saving a checkpoint at step {}", signals::stop_signal(),
                  progress_.step);
      interrupted = true;
      break;
    }
  }
  // The bar stays where the loop left it; what follows (evaluation, checkpoint, the summary) is logged below it.
  if (ctx_.rank == 0) metrics_->finish();
  if (interrupted) {
    save_checkpoint();
    checkpoints_->wait();
    FT_LOG_WARN(
        "stopped at step {} of {}; run the same command again to resume from the checkpoint (or: finetune "
        "train --config {})",
        progress_.step, data_.total_steps, (run_dir_ / "config.yaml").string());
    return ExitCode::kInterrupted;
  }
  check_non_finite();
  evaluate();
  save_checkpoint();
  checkpoints_->wait();
  save_final_model();
  FT_LOG_INFO("done: {} steps, {} target tokens, {:.1f} s", progress_.step, progress_.tokens_seen,
              seconds_since(run_start));
  return ExitCode::kOk;
}

metrics::TrainRecord Trainer::train_record(const metrics::LogWindow& window, const StepOutput& last, double lr) {
  // The loss and the objective's metrics are sums over units on each rank: one collective, then means.
  std::vector<double> sums{window.loss_sum().item<double>()};
  for (const auto& [name, sum] : window.metric_sums()) sums.push_back(sum.item<double>());
  sums = all_reduce_sum(std::move(sums));
  const double units = std::max<double>(1, static_cast<double>(window.units()));
  metrics::TrainRecord record;
  record.loss = sums[0] / units;
  for (size_t i = 0; i < window.metric_sums().size(); ++i) {
    record.objective[window.metric_sums()[i].first] = sums[i + 1] / units;
  }
  record.lr = lr;
  record.grad_norm = last.grad_norm.item<double>();
  record.loss_scale = scaler_->get_scale();
  // Throughput counts every position the model processed (as torchtune's tokens_per_second does); MFU uses it.
  record.tokens_per_s = window.positions_per_s();
  record.target_tokens_per_s = window.target_tokens_per_s();
  record.step_time_s = window.step_time_s();
  record.data_wait_s = window.data_wait_s();
  record.tokens_seen = progress_.tokens_seen;
  record.epoch = progress_.epoch;
  record.skipped_steps = progress_.nan_skips + scaler_->skipped_steps();
  record.peak_memory_gib = peak_memory_gib(ctx_.device);
  if (ctx_.device.is_cuda()) record.peak_reserved_gib = peak_memory_gib(ctx_.device, /*reserved=*/true);
  if (model_.peak_tflops > 0) {
    record.mfu = metrics::mfu(record.tokens_per_s, model_.flops_per_token, model_.peak_tflops, ctx_.world_size);
  }
  return record;
}

void Trainer::log_first_step(double setup_s, double step_s) {
  // The time outside the step that a user waits for at every start (model build or load, data, resume).
  FT_LOG_INFO("first step done {:.1f} s after the start: setup {:.1f} s (tokenizer and model {:.1f} s, data {:.1f} s), "
              "first step {:.1f} s",
              setup_s + step_s, setup_s, setup_times_.model_s, setup_times_.data_s, step_s);
  if (ctx_.rank == 0) {
    metrics_->log(metrics::kStartEvent, progress_.step,
                  {{"setup_s", setup_s},
                   {"model_s", setup_times_.model_s},
                   {"data_s", setup_times_.data_s},
                   {"first_step_s", step_s}});
  }
}

void Trainer::check_non_finite() {
  // Under fp16 the loss scaler owns overflow handling and counts its own skipped steps: those are normal.
  if (scaler_->enabled()) {
    pending_skips_.clear();
    return;
  }
  std::optional<int64_t> first_bad;
  for (const auto& [step, flag] : pending_skips_) {
    if (flag.item<float>() == 0.0f) continue;
    ++progress_.nan_skips;
    if (!first_bad) first_bad = step;
    FT_LOG_WARN("step {}: non-finite loss or gradient norm; the update was skipped", step);
  }
  pending_skips_.clear();
  if (first_bad && progress_.nan_skips > cfg_.train.max_nan_skips) {
    throw Error(fmt::format("non-finite loss at step {} ({} step(s) skipped so far, train.max_nan_skips={}); the "
                            "weights were not updated by those steps and no checkpoint was written after them",
                            *first_bad, progress_.nan_skips, cfg_.train.max_nan_skips),
                "lower optimizer.lr, keep train.grad_clip on, check the data, or raise train.max_nan_skips to "
                "tolerate rare spikes");
  }
}

double peak_memory_gib(c10::Device device, bool reserved) {
#ifdef FT_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto kind = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    const auto peak = reserved ? stats.reserved_bytes[kind].peak : stats.allocated_bytes[kind].peak;
    return static_cast<double>(peak) / (1024.0 * 1024.0 * 1024.0);
  }
#endif
  (void)device;
  (void)reserved;
  return 0.0;
}

}  // namespace ft::train

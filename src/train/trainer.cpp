// Assembling the parts (train/build.h), the step and the loop. Evaluation lives in loop_eval.cpp, checkpoints in
// loop_checkpoint.cpp.
#include "train/trainer.h"

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/checkpoint_store.h"
#include "ckpt/checkpoint_writer.h"
#include "config/loader.h"
#include "data/batch.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "dist/env.h"
#include "metrics/meters.h"
#include "metrics/metrics.h"
#include "metrics/mfu.h"
#include "metrics/profiler.h"
#include "metrics/record.h"
#include "model/fp8_training.h"
#include "model/mode_guards.h"
#include "model/pretrained.h"
#include "model/transformer.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "train/kernel_warm_up.h"
#include "train/objective.h"
#include "train/precision.h"
#include "train/resume_inputs.h"
#include "train/schedule.h"
#include "util/fmt.h"
#include "util/process.h"
#include "util/signals.h"
#include "util/stopwatch.h"

#ifdef FT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ft::train {
namespace {

using Clock = SteadyClock;

// Turns an out-of-memory error (CUDA's OutOfMemoryError, or the CPU allocator's failure) into advice in the user's
// own settings.
[[noreturn]] void rethrow_oom(const Config& cfg, c10::Device device, const std::string& what) {
  throw Error(
      fmt::format("out of {} memory during the training step (train.micro_batch_size={}, data.seq_len={}, "
                  "train.precision={}): {}",
                  device.is_cuda() ? "GPU" : "CPU", cfg.train.micro_batch_size, cfg.data.seq_len,
                  name_of(cfg.train.precision), what.substr(0, what.find('\n'))),
      std::string("lower train.micro_batch_size (raise train.grad_accum_steps to keep the batch), set "
                  "model.activation_checkpointing=true, use train.precision=bf16, or train LoRA adapters "
                  "(lora.enabled=true)") +
          (cfg.lora.enabled ? ""
                            : "; a full fine-tune's weights and optimizer state take 8 bytes per parameter with "
                              "train.precision=bf16-pure optimizer.kahan_summation=true optimizer.name=adamw_8bit "
                              "(16 with F32 master weights)"));
}

// LibTorch's CPU allocator reports a failed allocation as a plain c10::Error.
bool is_cpu_allocation_failure(const c10::Error& e) {
  return std::string(e.what_without_backtrace()).find("DefaultCPUAllocator: can't allocate memory") !=
         std::string::npos;
}

}  // namespace

Trainer::Trainer(Config config, RunContext ctx, std::function<void()> accepted)
    : cfg_(std::move(config)), ctx_(std::move(ctx)), peaks_(ctx_.device) {
  const PrecisionPolicy precision = resolve_precision(cfg_);
  // The kernels of the run (train.fused_kernels on this device in the compute dtype), resolved once for the model
  // and the objective's loss.
  const auto kernels = model::KernelPolicy::resolve(cfg_.train.fused_kernels, ctx_.device, precision.compute);
  const auto model_start = Clock::now();
  tokenizer_ = build_tokenizer(cfg_);
  const auto layout = loader_options(cfg_, *tokenizer_, ctx_, /*shuffle=*/false);
  // Only a read of weight files takes long enough to hide the warm-up; a model drawn on the GPU is ready sooner.
  std::optional<KernelWarmUp> warm_up;
  if (!cfg_.model.path.empty() && !cfg_.model.random_weights) {
    warm_up.emplace(cfg_, build_model_args(cfg_, *tokenizer_, precision), precision, kernels,
                    WarmUpBatch{layout.micro_batch_size, layout.seq_len, layout.packing});
  }
  model_ = build_model(cfg_, *tokenizer_, precision, ctx_);
  model_.model->set_kernel_policy(kernels);
  auto objective = build_objective(cfg_, precision, kernels, *tokenizer_, ctx_);
  model_.build_s = seconds_since(model_start);
  const auto data_start = Clock::now();
  const auto collate = layout.collate();
  data_ = build_data(cfg_, *tokenizer_, ctx_, [&](data::PreferenceDataset& pairs) {
    objective->prepare_pairs(*model_.model, pairs, collate, cfg_.train.micro_batch_size, ctx_);
  });
  data_.build_s = seconds_since(data_start);
  // The base's weights are sampled for LoRA only: a full fine-tune's checkpoint holds every weight it resumes.
  inputs_ = resume_inputs(cfg_, data_.train_content, ctx_.rank == 0 && cfg_.lora.enabled && !cfg_.model.path.empty());
  optim_ = build_optimizer(cfg_, model_.trainable, data_.total_steps, ctx_, kernels.kernels);
  optim_.optimizer->start_compensation_at(std::move(model_.rounding_residuals));
  optim_.optimizer->write_amax_into(model::fp8_weight_amax_sinks(*model_.model));
  if (warm_up) warm_up->finish();
  checkpoints_ = build_checkpoints(cfg_, ctx_, !optim_.zero_owners.empty());
  step_ = std::make_unique<TrainStep>(cfg_, ctx_, model_, optim_, std::move(objective),
                                      build_scaler(cfg_, precision, ctx_.device),
                                      build_ddp(cfg_, model_.trainable, precision, ctx_));
  metrics_ = build_metrics(cfg_, data_.total_steps, ctx_.rank);
  profiler_ = build_profiler(cfg_, ctx_);
  // What a checkpoint saves besides weights and optimizer state (trainer_state.json, rng.safetensors).
  state_parts_ = std::make_unique<ckpt::CheckpointManager>(ctx_.comm, ctx_.rank);
  state_parts_->add_shared("progress", progress_);
  state_parts_->add_shared("scaler", step_->scaler());
  state_parts_->add_per_rank("loader", *data_.train_loader);
  ddp_buckets_ = std::make_unique<DdpBuckets>(step_->ddp());
  state_parts_->add_shared("ddp", *ddp_buckets_, /*optional=*/true);  // since 2026-12-05
  evaluator_ = std::make_unique<Evaluator>(cfg_, ctx_, precision, *model_.model, *tokenizer_, data_.eval_set,
                                           step_->objective(), metrics_.get());

  FT_LOG_INFO("precision: {}", precision.describe());
  FT_LOG_INFO("kernels: {}", model_.model->kernel_summary(cfg_.data.packing));
  accept(accepted);
}

Trainer::~Trainer() = default;

std::vector<data::Batch> Trainer::next_batches(double& wait_s) {
  const auto start = Clock::now();
  std::vector<data::Batch> batches;
  batches.reserve(static_cast<size_t>(cfg_.train.grad_accum_steps));
  while (static_cast<int64_t>(batches.size()) < cfg_.train.grad_accum_steps) {
    auto batch = data_.train_loader->next();
    if (!batch) {  // end of an epoch: the loader starts the next one on the following call
      ++progress_.epoch;
      batch = data_.train_loader->next();
      FT_CHECK(batch.has_value(), "the training data yields no batch; is data.train empty after filtering?");
    }
    batches.push_back(std::move(*batch));
  }
  wait_s += seconds_since(start);
  return batches;
}

StepOutput Trainer::guarded_step(double& wait_s) {
  try {
    return step_->run(next_batches(wait_s), progress_.step + 1);
  } catch (const c10::OutOfMemoryError& e) {
    rethrow_oom(cfg_, ctx_.device, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    if (is_cpu_allocation_failure(e)) rethrow_oom(cfg_, ctx_.device, e.what_without_backtrace());
    throw;
  }
}

void Trainer::accept(const std::function<void()>& accepted) {
  const bool resumed = try_resume();
  // A finished run stays as it is: its config.yaml keeps the settings that trained it (run() changes nothing).
  // Every rank asks (complete() may broadcast), once.
  complete_ = complete();
  if (ctx_.rank == 0 && accepted && !complete_) accepted();
  if (resumed) return;
  FT_LOG_INFO("starting a new run in {}", run_dir().string());
  if (const size_t n = optim_.optimizer->starting_compensations()) {
    FT_LOG_INFO(
        "optimizer.kahan_summation: the compensation of {} tensors starts with what casting their F32 "
        "values to bf16 dropped",
        n);
  }
}

bool Trainer::complete() const {
  // Only a resumed run can be past its last step.
  return progress_.step >= data_.total_steps && final_model_is_current();
}

bool Trainer::begin() {
  if (complete_) {
    FT_LOG_INFO("the run is complete: step {} of {}; the final {} is in {} (raise train.max_steps to train further)",
                progress_.step, data_.total_steps, cfg_.lora.enabled ? "adapter" : "model", final_model_dir().string());
    return false;
  }
  FT_LOG_INFO("training {} steps: micro_batch_size {} x grad_accum_steps {} x world_size {}, seq_len {}, {}",
              data_.total_steps, cfg_.train.micro_batch_size, cfg_.train.grad_accum_steps, ctx_.world_size,
              cfg_.data.seq_len, name_of(cfg_.train.precision));
  return true;
}

ExitCode Trainer::run(const std::function<void()>& started) {
  if (!begin()) return ExitCode::kOk;
  const auto schedule = LoopSchedule::from_config(cfg_, data_.total_steps);
  const auto run_start = Clock::now();
  const double setup_s = process::seconds_since_start();
  peaks_.end_setup();
  const int64_t first_step = progress_.step + 1;
  metrics::LogWindow window(ctx_.device);  // the steps since the last log line
  while (progress_.step < data_.total_steps) {
    const auto step_start = Clock::now();
    const double lr = optim_.schedule->lr_at(progress_.step);
    optim_.optimizer->set_lr(lr);
    profiler_->before_step(progress_.step + 1);
    double wait_s = 0.0;
    StepOutput out = guarded_step(wait_s);
    ++progress_.step;
    if (progress_.step == first_step) {
      after_first_step(schedule.checkpoints_before_the_end(), setup_s, seconds_since(run_start));
    }
    profiler_->after_step(progress_.step);
    progress_.tokens_seen += out.global_tokens;
    window.add_step({out.global_units, out.global_tokens, out.global_positions, out.loss_sum, out.metric_sums,
                     seconds_since(step_start), wait_s});

    if (schedule.log_at(progress_.step)) log_window(window, out, lr);
    if (ctx_.rank == 0) metrics_->tick(progress_.step);
    if (schedule.eval_at(progress_.step)) evaluator_->run(progress_);
    if (schedule.checkpoint_at(progress_.step)) save_checkpoint();
    checkpoints_->rethrow_failure();  // a background save that failed stops the run as a synchronous one would
    const bool stop = dist::any_rank(*ctx_.comm, signals::stop_requested());
    if (progress_.step == first_step && !stop && ctx_.rank == 0 && started) started();
    if (stop) return stop_on_signal();
  }
  if (progress_.step < first_step && ctx_.rank == 0 && started) started();  // no step was left to train
  return finish(seconds_since(run_start));
}

void Trainer::after_first_step(bool checkpoints_ahead, double setup_s, double step_s) {
  log_first_step(setup_s, step_s);
  if (checkpoints_ahead) {  // the optimizer state exists now: the host copy of background saves can be made
    model::ModelFiles files;
    checkpoints_->prepare(checkpoint_tensors(files));
  }
}

void Trainer::log_window(metrics::LogWindow& window, const StepOutput& last, double lr) {
  step_->non_finite().check(progress_.nan_skips);  // host sync: once per log interval
  const metrics::TrainRecord record = train_record(window, last, lr);
  if (ctx_.rank == 0) {
    const nlohmann::json fields = record.to_json();
    metrics_->log(metrics::kTrainEvent, progress_.step, fields);
    metrics_->progress(progress_.step, fields);
  }
  window.reset();
}

ExitCode Trainer::stop_on_signal() {
  FT_LOG_WARN("stop requested by signal {}: saving a checkpoint at step {}", signals::stop_signal(), progress_.step);
  // The bar stays where the loop left it; what follows is logged below it.
  if (ctx_.rank == 0) metrics_->finish();
  save_checkpoint();
  checkpoints_->wait();
  FT_LOG_WARN(
      "stopped at step {} of {}; run the same command again to resume from the checkpoint (or: finetune "
      "train --config {})",
      progress_.step, data_.total_steps, (run_dir() / "config.yaml").string());
  return ExitCode::kInterrupted;
}

ExitCode Trainer::finish(double run_s) {
  if (ctx_.rank == 0) metrics_->finish();
  step_->non_finite().check(progress_.nan_skips);
  evaluator_->run(progress_);
  save_checkpoint();
  checkpoints_->wait();
  save_final_model();
  FT_LOG_INFO("done: {} steps, {} target tokens, {:.1f} s", progress_.step, progress_.tokens_seen, run_s);
  return ExitCode::kOk;
}

metrics::TrainRecord Trainer::train_record(const metrics::LogWindow& window, const StepOutput& last, double lr) {
  // The loss and the objective's metrics are sums over units on each rank: one collective, then means.
  std::vector<double> sums{window.loss_sum().item<double>()};
  for (const auto& [name, sum] : window.metric_sums()) sums.push_back(sum.item<double>());
  sums = dist::all_reduce_sum(*ctx_.comm, std::move(sums));
  const double units = std::max<double>(1, static_cast<double>(window.units()));
  metrics::TrainRecord record;
  record.loss = sums[0] / units;
  for (size_t i = 0; i < window.metric_sums().size(); ++i) {
    record.objective[window.metric_sums()[i].first] = sums[i + 1] / units;
  }
  record.lr = lr;
  record.grad_norm = last.grad_norm.item<double>();
  record.loss_scale = step_->scaler().get_scale();
  // Throughput counts every position the model processed (as torchtune's tokens_per_second does); MFU uses it.
  record.tokens_per_s = window.positions_per_s();
  record.target_tokens_per_s = window.target_tokens_per_s();
  record.step_time_s = window.step_time_s();
  record.data_wait_s = window.data_wait_s();
  record.tokens_seen = progress_.tokens_seen;
  record.epoch = progress_.epoch;
  record.skipped_steps = progress_.nan_skips + step_->scaler().skipped_steps();
  record.peak_memory_gib = peaks_.allocated_gib();
  if (ctx_.device.is_cuda()) {
    record.peak_reserved_gib = peaks_.reserved_gib();
    record.step_peak_memory_gib = peaks_.step_allocated_gib();
  }
  if (model_.peak_tflops > 0) {
    record.mfu = metrics::mfu(record.tokens_per_s, model_.flops_per_token, model_.peak_tflops, ctx_.world_size);
  }
  return record;
}

void Trainer::log_first_step(double setup_s, double step_s) {
  // The time outside the step that a user waits for at every start (model build or load, data, resume).
  FT_LOG_INFO(
      "first step done {:.1f} s after the start: setup {:.1f} s (tokenizer and model {:.1f} s, data {:.1f} s), "
      "first step {:.1f} s",
      setup_s + step_s, setup_s, model_.build_s, data_.build_s, step_s);
  if (ctx_.rank == 0) {
    metrics_->log(
        metrics::kStartEvent, progress_.step,
        {{"setup_s", setup_s}, {"model_s", model_.build_s}, {"data_s", data_.build_s}, {"first_step_s", step_s}});
  }
}

#ifdef FT_WITH_CUDA
namespace {

double gib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

auto stats_of(c10::Device device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
}

constexpr auto kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

}  // namespace

void DevicePeaks::end_setup() {
  if (!device_.is_cuda()) return;
  setup_allocated_gib_ = allocated_gib();
  setup_reserved_gib_ = reserved_gib();
  c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
}

double DevicePeaks::allocated_gib() const {
  return std::max(setup_allocated_gib_, step_allocated_gib());
}

double DevicePeaks::reserved_gib() const {
  if (!device_.is_cuda()) return 0.0;
  return std::max(setup_reserved_gib_, gib(stats_of(device_).reserved_bytes[kAggregate].peak));
}

double DevicePeaks::step_allocated_gib() const {
  return device_.is_cuda() ? gib(stats_of(device_).allocated_bytes[kAggregate].peak) : 0.0;
}

#else  // no CUDA: no caching allocator to ask

void DevicePeaks::end_setup() {}
double DevicePeaks::allocated_gib() const {
  return 0.0;
}
double DevicePeaks::reserved_gib() const {
  return 0.0;
}
double DevicePeaks::step_allocated_gib() const {
  return 0.0;
}

#endif

}  // namespace ft::train

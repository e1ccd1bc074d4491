// The training loop of `finetune train`: assembles the run from the parts that train/build.h builds out of the frozen
// config (tokenizer, data, model, optimizer, loss scaler, metrics, distributed engine), trains with micro-batches and
// gradient accumulation, evaluates, logs and checkpoints, and resumes exactly from the newest valid checkpoint.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "metrics/meters.h"
#include "metrics/record.h"
#include "model/kernel_policy.h"
#include "train/build.h"
#include "train/ddp_buckets.h"
#include "train/evaluator.h"
#include "train/train_state.h"
#include "train/train_step.h"
#include "util/checksum.h"
#include "util/error.h"

namespace ft::data {
struct Batch;
}
namespace ft::ckpt {
class CheckpointManager;
class CheckpointWriter;
}  // namespace ft::ckpt
namespace ft::model {
struct ModelFiles;
}

namespace ft::train {

// The caching allocator's peaks on one device in GiB (0 on the CPU), the setup's (model load, data, reference
// log-probs) apart from the steps': the steps' peak is what the training itself holds, the larger of the two what the
// device must hold. end_setup() keeps the setup's and starts counting the steps' from what is allocated then.
class DevicePeaks {
 public:
  explicit DevicePeaks(c10::Device device) : device_(device) {}
  void end_setup();
  double allocated_gib() const;       // since the start
  double reserved_gib() const;        // since the start
  double step_allocated_gib() const;  // since end_setup()

 private:
  c10::Device device_;
  double setup_allocated_gib_ = 0.0, setup_reserved_gib_ = 0.0;
};

class Trainer {
 public:
  // `config` is frozen: prepare_run filled it in. Builds every part (train/build.h) in order: tokenizer, model, data,
  // optimizer and schedule, loss scaler, metrics, profiler, DDP; then resumes from the newest valid checkpoint or
  // starts a new run. `accepted` runs on rank 0 once the run is set up and its resume accepted, before the first
  // step: it writes the run directory's config.yaml, so that a refused start leaves the one there untouched.
  Trainer(Config config, RunContext ctx, std::function<void()> accepted = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end (ExitCode::kOk) or until SIGINT/SIGTERM (as util/signals.h records them once the caller has
  // called signals::install()), after which it saves a checkpoint and returns ExitCode::kInterrupted. `started` runs
  // on rank 0 once the first step is done and no rank was asked to stop (at the end when no step was left): the
  // command deletes an earlier run that run.overwrite set aside there, so a run that fails or is stopped before
  // then gives it back.
  ExitCode run(const std::function<void()>& started = {});

 private:
  // The loop (trainer.cpp): the start (resumed or new), the steps, and the end or a stop by signal.
  void accept(const std::function<void()>& accepted);     // resumes or starts a new run, then calls `accepted`
  bool begin();                                           // false when the run in output_dir is already complete
  bool complete() const;  // resumed past the last step, the final model written (every rank calls it: it broadcasts)
  std::vector<data::Batch> next_batches(double& wait_s);  // train.grad_accum_steps micro-batches, across epochs
  StepOutput guarded_step(double& wait_s);                // the step, with out-of-memory errors turned into advice
  void after_first_step(bool checkpoints_ahead, double setup_s, double step_s);
  void log_window(metrics::LogWindow& window, const StepOutput& last, double lr);
  ExitCode stop_on_signal();
  ExitCode finish(double run_s);
  // The window's log line: loss, learning rate, rates, memory and the objective's metrics (one collective).
  metrics::TrainRecord train_record(const metrics::LogWindow& window, const StepOutput& last, double lr);

  // Checkpoints (loop_checkpoint.cpp).
  void save_checkpoint();
  bool try_resume();
  void save_final_model();
  std::filesystem::path final_model_dir() const;  // <run>/model, or <run>/adapter under LoRA
  bool final_model_is_current() const;            // written after the newest checkpoint (the run ended there)
  void write_model_dir(const std::filesystem::path& dir) const;  // HF model or PEFT adapter + tokenizer files
  model::ModelFiles model_files() const;                         // what write_model_dir writes, taken now
  // Every tensor this rank writes into a checkpoint: "optimizer/<key>", and on rank 0 "model/<index>" in the order
  // of `files` (model_files(), returned with its tensors moved out).
  std::map<std::string, at::Tensor> checkpoint_tensors(model::ModelFiles& files) const;
  // `files` (possibly host copies taken earlier) and the tokenizer files into `dir`.
  FileDigests write_model_files(const model::ModelFiles& files, const std::filesystem::path& dir) const;
  std::string fingerprint() const;  // what a resumed run must share with this one (train/fingerprint.h)

  // "first step done N s after the start" in train.log, and a "start" event in metrics.jsonl.
  void log_first_step(double setup_s, double step_s);

  std::filesystem::path run_dir() const { return cfg_.run.output_dir; }

  const Config cfg_;
  const RunContext ctx_;  // rank, world size, communicator, device

  std::unique_ptr<tok::Tokenizer> tokenizer_;
  ModelParts model_;                 // the model, its trainable parameters, FLOPs per token and peak TFLOP/s
  DataParts data_;                   // train and eval sets, this rank's train loader, the run's total steps
  nlohmann::json inputs_;            // what the run reads whose content no setting pins (train/resume_inputs.h)
  OptimizerParts optim_;             // AdamW (with ZeRO-1: over this rank's own parameters), the LR schedule
  std::unique_ptr<TrainStep> step_;  // the objective, the loss scaler, DDP and the skipped updates: one step
  std::unique_ptr<metrics::MetricsLogger> metrics_;  // rank 0 only
  std::unique_ptr<metrics::StepProfiler> profiler_;
  std::unique_ptr<DdpBuckets> ddp_buckets_;               // DDP's gradient buckets, for checkpoints
  std::unique_ptr<ckpt::CheckpointManager> state_parts_;  // progress_, the scaler, the loader, DDP's buckets
  std::unique_ptr<Evaluator> evaluator_;                  // eval loss, exact match and samples; the latest eval

  TrainState progress_;  // step, epoch, tokens seen, skips, best eval loss
  bool complete_ = false;  // accept() found the run complete: run() trains nothing
  DevicePeaks peaks_;    // the memory the setup and the steps took

  // Last, so destroyed first: a save still being written in the background reads the config and tokenizer.
  std::unique_ptr<ckpt::CheckpointWriter> checkpoints_;
};

}  // namespace ft::train

// The training loop of `finetune train`: assembles the run from the parts that train/build.h builds out of the frozen
// config (tokenizer, data, model, optimizer, loss scaler, metrics, distributed engine), trains with micro-batches and
// gradient accumulation, evaluates, logs and checkpoints, and resumes exactly from the newest valid checkpoint.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "metrics/meters.h"
#include "metrics/record.h"
#include "model/kernel_policy.h"
#include "train/build.h"
#include "train/precision.h"
#include "train/train_state.h"
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

class Objective;

// Peak memory allocated (or reserved by the caching allocator) on `device` since the start, in GiB (0 on the CPU).
double peak_memory_gib(c10::Device device, bool reserved = false);

class Trainer {
 public:
  // `config` is frozen: prepare_run filled it in. Builds every part (train/build.h) in order: tokenizer, model, data,
  // optimizer and schedule, loss scaler, metrics, profiler, DDP. `accepted` runs on rank 0 once the run is set up and
  // its resume accepted, before the first step: it writes the run directory's config.yaml, so that a refused start
  // leaves the one there untouched.
  Trainer(Config config, RunContext ctx, std::function<void()> accepted = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end (ExitCode::kOk) or until SIGINT/SIGTERM (as util/signals.h records them once the caller has
  // called signals::install()), after which it saves a checkpoint and returns ExitCode::kInterrupted.
  ExitCode run();

 private:
  // One optimizer step over grad_accum_steps micro-batches (trainer.cpp).
  struct StepOutput {
    at::Tensor loss_sum;              // F32 [] this rank's loss summed over its units (device)
    metrics::MetricSums metric_sums;  // the objective's own metrics, this rank's sums (device)
    at::Tensor grad_norm;             // F32 [] global gradient norm before clipping (device)
    int64_t global_units = 0;         // the objective's units of the step on all ranks (target tokens, or pairs)
    int64_t global_tokens = 0;        // target tokens of the step on all ranks
    int64_t global_positions = 0;     // token positions of the step on all ranks
    double data_wait_s = 0.0;         // time spent waiting for batches
  };
  // The window's log line: loss, learning rate, rates, memory and the objective's metrics (one collective).
  metrics::TrainRecord train_record(const metrics::LogWindow& window, const StepOutput& last, double lr);
  StepOutput train_step();
  data::Batch next_batch(double& wait_s);

  // Evaluation (loop_eval.cpp).
  metrics::EvalRecord evaluate();  // logged as an "eval" event on rank 0
  std::vector<std::pair<std::string, std::string>> sample_generations();  // (prompt, completion) for eval.prompts
  std::string generate_text(const std::vector<int64_t>& prompt_ids);     // greedy, eval.max_new_tokens, as text

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

  // Counts the steps skipped for non-finite losses since the last call (one host sync) and stops the run when
  // train.max_nan_skips is exceeded.
  void check_non_finite();

  // Distributed helpers.
  double all_reduce_sum(double value) const;                             // host value summed over ranks
  std::vector<double> all_reduce_sum(std::vector<double> values) const;  // element-wise, one collective
  bool any_rank(bool flag) const;                                        // true if any rank has flag set

  const Config cfg_;
  const std::string resolved_yaml_;  // cfg_ as to_yaml prints it (saved in checkpoints)
  std::function<void()> accepted_;
  const RunContext ctx_;  // rank, world size, communicator, device
  const std::filesystem::path run_dir_;

  std::unique_ptr<data::Tokenizer> tokenizer_;
  ModelParts model_;                      // the model, its trainable parameters, FLOPs per token and peak TFLOP/s
  std::unique_ptr<Objective> objective_;  // the loss of a micro-batch, and what it is normalised by
  DataParts data_;                        // train and eval sets, this rank's train loader, the run's total steps
  OptimizerParts optim_;                  // AdamW (with ZeRO-1: over this rank's own parameters), the LR schedule
  std::unique_ptr<optim::GradScaler> scaler_;
  std::unique_ptr<metrics::MetricsLogger> metrics_;  // rank 0 only
  std::unique_ptr<metrics::StepProfiler> profiler_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<ckpt::CheckpointManager> state_parts_;  // progress_, scaler_ and data_.train_loader for checkpoints

  // Seconds the constructor spent on the tokenizer and model, and on the data, for the first-step log line.
  struct SetupTimes {
    double model_s = 0.0;
    double data_s = 0.0;
  } setup_times_;

  // Precision, resolved once from the config (train/precision.h).
  const PrecisionPolicy precision_;
  // The kernels of the run (train.fused_kernels on ctx_.device in precision_.compute), resolved once; the model
  // gets it too. `fused`: the chunked linear + cross-entropy.
  const model::KernelPolicy kernels_;

  // Progress.
  TrainState progress_;                                        // step, epoch, tokens seen, skips, best eval loss
  std::vector<std::pair<int64_t, at::Tensor>> pending_skips_;  // (step, F32 [] 1 if skipped) not yet read
  std::optional<double> last_eval_loss_;  // of the latest evaluation, for checkpoint.keep_best
  int64_t last_eval_step_ = -1;           // the step of that evaluation

  // Last, so destroyed first: a save still being written in the background reads the config and tokenizer.
  std::unique_ptr<ckpt::CheckpointWriter> checkpoints_;
};

}  // namespace ft::train

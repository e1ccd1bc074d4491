// The parts of a training run, each built by a free function from the frozen config (torchtitan's build_*
// functions): prepare_run fills in what the config names but does not yet hold, then the Trainer assembles the
// tokenizer, model, data, optimizer, loss scaler, metrics, profiler and DDP engine that these return.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "model/args.h"
#include "model/pretrained.h"
#include "train/precision.h"
#include "train/run_dir.h"

namespace ft::dist {
class Communicator;
class DistributedDataParallel;
}  // namespace ft::dist
namespace ft::tok {
class Tokenizer;
}
namespace ft::data {
class DataLoader;
class BatchSource;
class PreferenceDataset;
struct LoaderOptions;
}  // namespace ft::data
namespace ft::model {
class Transformer;
}
namespace ft::optim {
class AdamW;
class GradScaler;
class LrSchedule;
}  // namespace ft::optim
namespace ft::metrics {
class MetricsLogger;
class StepProfiler;
}  // namespace ft::metrics
namespace ft::ckpt {
class CheckpointWriter;
}

namespace ft::train {

// Where this process trains: its place in the job and its device, resolved once by the command.
struct RunContext {
  int rank = 0;                              // global rank
  int world_size = 1;                        // ranks in the job
  std::shared_ptr<dist::Communicator> comm;  // spans every rank of the job
  c10::Device device{c10::kCPU};             // this rank's device (run.device)
};

// What the config names but does not hold yet, made before the config is frozen and written: the run directory and
// its train.log, the paths of the files the run makes for itself (config::fill_derived_paths), synthetic data
// (data.synth: missing files are generated) and a trained tokenizer (tokenizer.train_vocab_size > 0: into a
// tokenizer.path that does not exist yet, <path>/tokenizer.model for a directory; tokenizer.path then names the file).
// So config.yaml names the files the run used, and a rerun from it finds them. Also applies run.deterministic and
// the rule for a directory that holds an earlier run (train/run_dir.h). Rank 0 writes; every rank returns once the
// files exist. Rank 0 locks the run directory first; the lock lives as long as the returned object, and with
// run.overwrite the earlier run's files are set aside there until the command commits them (after the first step).
struct PreparedRun {
  RunDirLock lock;
  EarlierRunSetAside earlier_run;
};
PreparedRun prepare_run(Config& cfg, const RunContext& ctx);
// prepare_run's inputs alone (derived paths, synthetic data, the trained tokenizer), e.g. for `finetune data
// inspect`, which shows the data as the run will see it.
void prepare_inputs(Config& cfg, const RunContext& ctx);

// The tokenizer of the run (tokenizer.path, else model.path's), with tokenizer.add_tokens added.
std::unique_ptr<tok::Tokenizer> build_tokenizer(const Config& cfg);

// The shape of the run's model: model.path's config.json (the language model only), or the model.* dimensions with
// `vocab_size` rows.
model::ModelArgs model_shape(const Config& cfg, int64_t vocab_size);

// model_shape with the tokenizer's vocabulary and, for model.*, its special token ids; model.path's torch_dtype set
// to precision.param.
model::ModelArgs build_model_args(const Config& cfg, const tok::Tokenizer& tokenizer, const PrecisionPolicy& precision);

// The model as the run starts from, before adapters: model.path's weights (in precision.param, NF4 projections with
// model.quantize) or a fresh init from run.seed, with rows for tokenizer.add_tokens. Seeds the generators with
// run.seed: call seed_rank_generators after it. `residuals`: filled with what casting F32 weights to precision.param
// dropped (model::RoundingResiduals), when given.
std::shared_ptr<model::Transformer> build_base_model(const Config& cfg, const tok::Tokenizer& tokenizer,
                                                     const PrecisionPolicy& precision, const RunContext& ctx,
                                                     model::RoundingResiduals* residuals = nullptr);
// Seeds the generators for this rank's dropout and sampling (weights are initialised identically on every rank).
void seed_rank_generators(const Config& cfg, const RunContext& ctx);

// What the config adds to a base model: LoRA adapters (lora.*; under LoRA, trainable embedding rows for the
// `created` token ids), FP8 GEMMs (train.fp8, model.nf4_compute) and the memory levers
// (model.activation_checkpointing and activation_offload). Returns the projections either FP8 setting leaves in
// bf16.
std::vector<std::string> configure_model(model::Transformer& m, const Config& cfg, const std::vector<int64_t>& created);

struct ModelParts {
  std::shared_ptr<model::Transformer> model;                  // on ctx.device, in precision.param, in train mode
  std::vector<std::pair<std::string, at::Tensor>> trainable;  // name, parameter (requires grad), in model order
  double flops_per_token = 0;                                 // training FLOPs per token (6N + attention), for MFU
  double peak_tflops = 0;  // the device's peak dense bf16 TFLOP/s (logging.peak_tflops, else known GPUs); 0 = unknown
  double build_s = 0;      // seconds the tokenizer and model took to build (the Trainer times them), for the log
  // optimizer.kahan_summation's starting compensation for full fine-tunes in bf16/fp16 (model::RoundingResiduals):
  // handed to the optimizer, which holds it until each parameter's first step.
  model::RoundingResiduals rounding_residuals;
};
// The model: model.path's weights or a fresh init from run.seed, embedding rows for tokenizer.add_tokens, LoRA
// adapters, activation checkpointing and fused kernels as configured. Leaves the generator seeded per rank (dropout
// differs between ranks, the weights do not).
ModelParts build_model(const Config& cfg, const tok::Tokenizer& tokenizer, const PrecisionPolicy& precision,
                       const RunContext& ctx);

struct DataParts {
  std::shared_ptr<const data::BatchSource> train_set;  // data.train: tokenized SFT samples (cached), or pairs
  std::shared_ptr<const data::BatchSource> eval_set;   // data.eval, or null
  std::unique_ptr<data::DataLoader> train_loader;      // this rank's shard of train_set
  int64_t total_steps = 0;                             // optimizer steps of the whole run
  std::vector<std::string> train_content;  // per data.train source, what its samples came from (SourceStats::content)
  double build_s = 0;  // seconds the data took to build (the Trainer times it), for the first-step log line
};
// `prepare_pairs`, when set, sees every preference set (train, then eval) before a loader draws from it.
using PreparePairs = std::function<void(data::PreferenceDataset& pairs)>;
DataParts build_data(const Config& cfg, const tok::Tokenizer& tokenizer, const RunContext& ctx,
                     const PreparePairs& prepare_pairs = {});

// The run's batch layout for a loader of this rank (train or eval): preference pairs pack into rows of twice
// data.seq_len (a pair's two sequences).
data::LoaderOptions loader_options(const Config& cfg, const tok::Tokenizer& tokenizer, const RunContext& ctx,
                                   bool shuffle);

struct OptimizerParts {
  std::unique_ptr<optim::AdamW> optimizer;  // with ZeRO-1, over this rank's own parameters only
  std::vector<int> zero_owners;             // ZeRO-1: owner rank of each trainable entry; empty without ZeRO-1
  std::unique_ptr<optim::LrSchedule> schedule;
};
// cuda_kernels: the run's KernelPolicy::kernels (the optimizer's own CUDA kernels may run).
OptimizerParts build_optimizer(const Config& cfg, const std::vector<std::pair<std::string, at::Tensor>>& trainable,
                               int64_t total_steps, const RunContext& ctx, bool cuda_kernels);

// Dynamic loss scaling under fp16; a pass-through scaler otherwise.
std::unique_ptr<optim::GradScaler> build_scaler(const Config& cfg, const PrecisionPolicy& precision,
                                                c10::Device device);

// metrics.jsonl, TensorBoard and the progress line in the run directory: rank 0 only (null elsewhere).
std::unique_ptr<metrics::MetricsLogger> build_metrics(const Config& cfg, int64_t total_steps, int rank);

// The checkpoints of the run directory, written by every rank (`sharded`: ZeRO-1 optimizer shards) and, with
// checkpoint.async on (auto: on a GPU), in the background.
std::unique_ptr<ckpt::CheckpointWriter> build_checkpoints(const Config& cfg, const RunContext& ctx, bool sharded);

// The Kineto trace of train.profile_steps steps from train.profile_start_step into <run>/profile.
std::unique_ptr<metrics::StepProfiler> build_profiler(const Config& cfg, const RunContext& ctx);

// The gradient all-reduce over the trainable parameters when the job has more than one rank, else null.
std::unique_ptr<dist::DistributedDataParallel> build_ddp(
    const Config& cfg, const std::vector<std::pair<std::string, at::Tensor>>& trainable,
    const PrecisionPolicy& precision, const RunContext& ctx);

}  // namespace ft::train

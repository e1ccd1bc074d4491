// Trainer setup: run directory, synthetic data, tokenizer, model, data loaders, optimizer and DDP.
#include <ATen/Context.h>
#include <torch/utils.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/checkpoint_store.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/synth.h"
#include "data/tokenizer.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "metrics/metrics.h"
#include "metrics/mfu.h"
#include "metrics/profiler.h"
#include "model/lora.h"
#include "model/pretrained.h"
#include "model/transformer.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "train/trainer.h"
#include "util/device.h"
#include "util/fmt.h"

#ifdef FT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ft::train {
namespace {

void log_dataset_stats(const char* split, const data::DatasetStats& stats) {
  FT_LOG_INFO("{} data: {} samples per epoch, {} tokens ({} targets); {} truncated, {} dropped, {} bad lines skipped",
              split, stats.epoch_samples, stats.tokens, stats.target_tokens, stats.truncated, stats.dropped,
              stats.skipped);
  for (const auto& source : stats.sources) {
    if (source.skipped > 0) {
      FT_LOG_WARN("{}: skipped {} bad lines (first: {})", source.path, source.skipped,
                  fmt::join(source.skipped_lines, ", "));
    }
  }
}

std::string device_name(c10::Device device) {
#ifdef FT_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#endif
  return device.str();
}

}  // namespace

void Trainer::setup_run_dir() {
  device_ = resolve_device(cfg_.run.device, local_rank_);
  run_dir_ = cfg_.run.output_dir;
  if (rank_ == 0) {
    std::filesystem::create_directories(run_dir_);
    log::add_file_sink((run_dir_ / "train.log").string());
  }
  comm_->barrier();
  checkpoints_ = std::make_unique<ckpt::CheckpointStore>(
      run_dir_, ckpt::CheckpointStoreOptions{cfg_.checkpoint.keep_last, cfg_.checkpoint.keep_best});
  if (cfg_.run.deterministic) {
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  FT_LOG_INFO("run directory {} on {} (rank {}/{})", run_dir_.string(), device_.str(), rank_, world_size_);
}

void Trainer::prepare_synthetic_data() {
  const auto& synth = cfg_.data.synth;
  if (synth.task.empty()) return;
  // Sources without a path get one in the run directory; missing files are generated once, by rank 0.
  auto fill = [&](std::vector<DataSource>& sources, const char* split, int64_t count, int64_t seed_offset) {
    if (sources.empty() || count <= 0) return;
    auto& source = sources.front();
    if (source.path.empty()) source.path = (run_dir_ / "data" / (synth.task + "-" + split + ".jsonl")).string();
    if (rank_ == 0 && !std::filesystem::exists(source.path)) {
      data::write_synthetic(synth.task, count, static_cast<uint64_t>(synth.seed + seed_offset), source.path);
      FT_LOG_INFO("generated {} synthetic '{}' samples into {}", count, synth.task, source.path);
    }
  };
  fill(cfg_.data.train, "train", synth.train_samples, 0);
  fill(cfg_.data.eval, "eval", synth.eval_samples, 1000003);
  comm_->barrier();
}

void Trainer::setup_tokenizer() {
  std::filesystem::path file = cfg_.tokenizer.path;
  if (file.empty() && !cfg_.model.path.empty()) file = cfg_.model.path;  // the model directory: resolve() picks
  if (file.empty()) {
    // Train one on the training data at the first start; a resumed run reuses it.
    file = run_dir_ / "tokenizer" / "tokenizer.model";
    if (rank_ == 0 && !std::filesystem::exists(file)) {
      std::vector<std::filesystem::path> inputs;
      for (const auto& source : cfg_.data.train) inputs.emplace_back(source.path);
      data::TokenizerTrainOptions options;
      options.fields = cfg_.data.fields;
      const std::string model_type = name_of(cfg_.tokenizer.train_model_type);
      data::train_tokenizer(inputs, cfg_.tokenizer.train_vocab_size, model_type, file.parent_path(), options);
      FT_LOG_INFO("trained a {}-piece {} tokenizer into {}", cfg_.tokenizer.train_vocab_size, model_type,
                  file.string());
    }
    comm_->barrier();
  }
  tokenizer_ = data::Tokenizer::load(file, std::filesystem::path(cfg_.model.path));
  tokenizer_file_ = tokenizer_->model_file();
  if (!cfg_.tokenizer.add_tokens.empty()) {
    const auto& tokens = cfg_.tokenizer.add_tokens;
    const auto ids = tokenizer_->add_tokens(tokens);
    std::vector<std::string> added, existing;
    for (size_t i = 0; i < tokens.size(); ++i) {
      (ids[i].created ? added : existing).push_back(fmt::format("{} #{}", tokens[i], ids[i].id));
    }
    FT_LOG_INFO("tokenizer.add_tokens: {} new ({}){}", added.size(), fmt::join(added, ", "),
                existing.empty()
                    ? std::string()
                    : fmt::format("; already in the vocabulary, now special: {}", fmt::join(existing, ", ")));
  }
  FT_LOG_INFO("tokenizer: {} ({}, {} tokens; bos {}, eos {}, pad {})", tokenizer_file_.string(), tokenizer_->kind(),
              tokenizer_->vocab_size(), tokenizer_->bos_id(), tokenizer_->eos_id(), tokenizer_->pad_id());
}

void Trainer::setup_model() {
  const auto dtype = precision_.param;
  at::manual_seed(static_cast<uint64_t>(cfg_.run.seed));
  if (!cfg_.model.path.empty()) {
    model_ = model::load_pretrained(cfg_.model.path, device_, dtype);
  } else {
    model_ = std::make_shared<model::Transformer>(model::args_from_config(cfg_.model, tokenizer_->vocab_size()));
    model::init_weights(*model_, cfg_.model.init_std, static_cast<uint64_t>(cfg_.run.seed));
    model_->to(device_, dtype);
  }
  if (cfg_.data.seq_len > model_->args().max_position_embeddings) {
    FT_LOG_WARN(
        "data.seq_len {} exceeds the model's max_position_embeddings {}: positions past it were never "
        "trained (lower data.seq_len, or extend the context with rope scaling)",
        cfg_.data.seq_len, model_->args().max_position_embeddings);
  }
  // tokenizer.add_tokens: the new tokens get rows, the mean of the old ones (as transformers'
  // resize_token_embeddings), in the embedding and the LM head; under LoRA those rows are trained too.
  std::vector<int64_t> created;
  for (const auto& t : tokenizer_->added_tokens()) {
    if (t.created) created.push_back(t.id);
  }
  const int64_t old_vocab = model_->args().vocab_size;
  const int64_t vocab = std::max(old_vocab, tokenizer_->vocab_size());
  // A model trained from scratch was built with rows for them (random, like every other row).
  if (!created.empty() && (!cfg_.model.path.empty() || vocab > old_vocab)) {
    // mean_rows: new ids inside the old matrices of a pretrained model (a padded vocabulary); fresh: all rows that
    // start as the mean.
    std::vector<int64_t> mean_rows, fresh;
    for (int64_t id : created) {
      if (id < old_vocab && !cfg_.model.path.empty()) mean_rows.push_back(id);
      if (id >= old_vocab || !cfg_.model.path.empty()) fresh.push_back(id);
    }
    model_->resize_token_embeddings(vocab, mean_rows);
    FT_LOG_INFO(
        "tokenizer.add_tokens: embedding and LM head{} from {} to {} rows; rows {} start as the mean of the "
        "old rows{}",
        model_->args().tie_word_embeddings ? " (tied)" : "", old_vocab, vocab, fmt::join(fresh, ", "),
        cfg_.lora.enabled ? " and are trained with the adapters" : "");
  }
  if (cfg_.lora.enabled) model::apply_lora(*model_, cfg_.lora, static_cast<uint64_t>(cfg_.run.seed));
  if (cfg_.lora.enabled && !created.empty()) model_->add_token_rows(created);
  model_->set_activation_checkpointing(cfg_.model.activation_checkpointing);
  model_->set_fused_kernels(cfg_.train.fused_kernels);
  model_->train();
  trainable_.clear();
  int64_t trainable_count = 0;
  int64_t total_count = 0;
  for (const auto& item : model_->named_parameters()) {
    total_count += item.value().numel();
    if (!item.value().requires_grad()) continue;
    trainable_.emplace_back(item.key(), item.value());
    trainable_count += item.value().numel();
  }
  // Dropout and sampling differ per rank; weights were initialised identically above.
  at::manual_seed(static_cast<uint64_t>(cfg_.run.seed) + 7919ull * static_cast<uint64_t>(rank_ + 1));

  const auto& args = model_->args();
  metrics::FlopsModel flops;
  flops.n_layers = args.num_layers;
  flops.hidden = args.hidden_size;
  flops.intermediate = args.intermediate_size;
  flops.vocab = args.vocab_size;
  flops.seq_len = cfg_.data.seq_len;
  flops.heads = args.num_heads;
  flops.kv_heads = args.num_kv_heads;
  flops.head_dim = args.head_dim;
  flops.frozen_base = cfg_.lora.enabled;
  flops.adapter_params = cfg_.lora.enabled ? trainable_count : 0;
  flops_per_token_ = metrics::flops_per_token(flops);
  peak_tflops_ = metrics::peak_tflops(device_name(device_), cfg_.logging.peak_tflops);
  FT_LOG_INFO("model: {} layers, hidden {}, {} heads ({} kv), vocab {}; {:.2f}M parameters, {:.2f}M trainable{}",
              args.num_layers, args.hidden_size, args.num_heads, args.num_kv_heads, args.vocab_size,
              static_cast<double>(total_count) / 1e6, static_cast<double>(trainable_count) / 1e6,
              cfg_.lora.enabled ? " (LoRA)" : "");
}

void Trainer::setup_data() {
  train_set_ = data::TokenizedDataset::build(data::DatasetOptions::from_config(cfg_, /*eval=*/false), *tokenizer_);
  log_dataset_stats("train", train_set_->stats());
  if (!cfg_.data.eval.empty()) {
    eval_set_ = data::TokenizedDataset::build(data::DatasetOptions::from_config(cfg_, /*eval=*/true), *tokenizer_);
    log_dataset_stats("eval", eval_set_->stats());
  }
  train_loader_ = std::make_unique<data::DataLoader>(train_set_, loader_options(cfg_.data.shuffle));
  if (train_loader_->rows_per_rank() < cfg_.train.micro_batch_size) {
    FT_LOG_WARN(
        "data.train gives each rank {} row(s) per epoch, fewer than train.micro_batch_size={}: every micro-batch "
        "holds only those rows (lower train.micro_batch_size, or add data)",
        train_loader_->rows_per_rank(), cfg_.train.micro_batch_size);
  }

  const int64_t per_epoch = train_loader_->batches_per_epoch() / cfg_.train.grad_accum_steps;
  FT_CHECK(per_epoch > 0 || cfg_.train.max_steps > 0,
           fmt::format("one epoch holds {} micro-batches per rank, fewer than train.grad_accum_steps={}",
                       train_loader_->batches_per_epoch(), cfg_.train.grad_accum_steps));
  total_steps_ = cfg_.train.max_steps > 0 ? cfg_.train.max_steps : per_epoch * cfg_.train.epochs;
  if (rank_ == 0) {
    metrics::MetricsOptions options;
    options.tensorboard = cfg_.logging.tensorboard;
    options.progress = cfg_.logging.progress;
    options.total_steps = total_steps_;
    metrics_ = std::make_unique<metrics::MetricsLogger>(run_dir_, options);
  }
}

data::LoaderOptions Trainer::loader_options(bool shuffle) const {
  data::LoaderOptions loader;
  loader.micro_batch_size = cfg_.train.micro_batch_size;
  loader.seq_len = cfg_.data.seq_len;
  loader.packing = cfg_.data.packing;
  loader.pad_id = tokenizer_->pad_id();
  loader.seed = static_cast<uint64_t>(cfg_.run.seed);
  loader.rank = rank_;
  loader.world_size = world_size_;
  loader.prefetch = cfg_.data.prefetch;
  loader.shuffle = shuffle;
  loader.pin_memory = device_.is_cuda();
  return loader;
}

void Trainer::setup_optimizer() {
  optim::AdamWOptions opts;
  opts.lr = cfg_.optimizer.lr;
  opts.beta1 = cfg_.optimizer.betas.at(0);
  opts.beta2 = cfg_.optimizer.betas.at(1);
  opts.eps = cfg_.optimizer.eps;
  opts.weight_decay = cfg_.optimizer.weight_decay;
  opts.decay_norms_and_biases = cfg_.optimizer.decay_norms_and_biases;
  if (cfg_.distributed.zero == 1 && world_size_ > 1) {
    // ZeRO-1: this rank's optimizer holds only the parameters it owns (dist/zero.h).
    std::vector<int64_t> numels;
    for (const auto& [name, param] : trainable_) numels.push_back(param.numel());
    zero_owners_ = dist::assign_owners(numels, world_size_);
    std::vector<optim::NamedParam> owned;
    int64_t owned_numel = 0;
    for (size_t i = 0; i < trainable_.size(); ++i) {
      if (zero_owners_[i] != rank_) continue;
      owned.push_back(trainable_[i]);
      owned_numel += trainable_[i].second.numel();
    }
    FT_LOG_INFO(
        "ZeRO-1: optimizer state for {} of {} trainable tensors ({:.1f}% of the elements) on this rank", owned.size(),
        trainable_.size(),
        100.0 * static_cast<double>(owned_numel) /
            std::max<double>(1.0, static_cast<double>(std::accumulate(numels.begin(), numels.end(), int64_t{0}))));
    optimizer_ = std::make_unique<optim::AdamW>(owned, opts);
  } else {
    optimizer_ = std::make_unique<optim::AdamW>(trainable_, opts);
  }

  optim::ScheduleOptions sched;
  sched.type = cfg_.scheduler.type;
  sched.peak_lr = cfg_.optimizer.lr;
  sched.total_steps = total_steps_;
  sched.warmup_steps = cfg_.scheduler.warmup_steps;
  sched.warmup_ratio = cfg_.scheduler.warmup_ratio;
  sched.min_lr_ratio = cfg_.scheduler.min_lr_ratio;
  sched.decay_ratio = cfg_.scheduler.decay_ratio;
  schedule_ = std::make_unique<optim::LrSchedule>(sched);

  fused_loss_ = cfg_.train.fused_kernels && device_.is_cuda();
  FT_LOG_INFO("precision: {}", precision_.describe());
  FT_LOG_INFO("kernels: attention {}; {}{}", model_->attention_path(cfg_.data.packing, device_, precision_.compute),
              fused_loss_ ? "chunked linear + cross-entropy, fused RMSNorm and RoPE"
                          : "full logits + cross-entropy, composite RMSNorm and RoPE",
              model_->args().final_logit_softcapping ? "; final logit soft-capping" : "");
  profiler_ = std::make_unique<metrics::StepProfiler>(cfg_.train.profile_start_step, cfg_.train.profile_steps,
                                                      run_dir_ / "profile", rank_, device_);
  optim::GradScalerOptions scaler;
  scaler.enabled = precision_.loss_scaling;
  scaler.init_scale = cfg_.train.loss_scale_init;
  scaler.growth_interval = cfg_.train.loss_scale_interval;
  scaler_ = std::make_unique<optim::GradScaler>(scaler, device_);
  // What a checkpoint saves besides weights and optimizer state (trainer_state.json, rng.safetensors).
  state_parts_ = std::make_unique<ckpt::CheckpointManager>(comm_, rank_);
  state_parts_->add_shared("progress", progress_);
  state_parts_->add_shared("scaler", *scaler_);
  state_parts_->add_per_rank("loader", *train_loader_);

  if (world_size_ > 1) {
    std::vector<at::Tensor> params;
    params.reserve(trainable_.size());
    for (const auto& [name, param] : trainable_) params.push_back(param);
    dist::DdpOptions ddp;
    ddp.bucket_cap_mb = cfg_.distributed.bucket_cap_mb;
    ddp.reduction = dist::GradReduction::kSum;
    ddp.reduce_dtype = precision_.reduce;
    ddp_ = std::make_unique<dist::DistributedDataParallel>(*comm_, std::move(params), ddp);
  }
}

}  // namespace ft::train

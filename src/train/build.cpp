// The build_* functions of train/build.h: each part of a run from the frozen config.
#include "train/build.h"

#include <ATen/Context.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "ckpt/checkpoint_store.h"
#include "ckpt/checkpoint_writer.h"
#include "config/derived_paths.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/preference_dataset.h"
#include "data/records.h"
#include "data/synth.h"
#include "data/tokenizer_train.h"
#include "dist/comm.h"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "metrics/metrics.h"
#include "metrics/mfu.h"
#include "metrics/profiler.h"
#include "model/fp8_training.h"
#include "model/kernel_policy.h"
#include "model/lora.h"
#include "model/nf4_linear.h"
#include "model/pretrained.h"
#include "model/transformer.h"
#include "optim/adamw_8bit.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "train/run_dir.h"
#include "util/error.h"
#include "util/fmt.h"
#include "util/log.h"

#ifdef FT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ft::train {
namespace {

void log_dataset_stats(const char* split, const data::DatasetStats& stats) {
  FT_LOG_INFO("{} data: {} samples per epoch, {} tokens ({} targets); {} truncated, {} dropped, {} bad lines skipped",
              split, stats.epoch_samples, stats.tokens, stats.target_tokens, stats.truncated, stats.dropped,
              stats.skipped);
  for (const auto& source : stats.sources) data::warn_skipped_lines(source.path, source.skipped, source.skipped_lines);
}

std::string device_name(c10::Device device) {
#ifdef FT_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#endif
  return device.str();
}

// data.synth: rank 0 generates the sources fill_derived_paths named, unless they exist.
void generate_synthetic_data(const Config& cfg, const RunContext& ctx) {
  const auto& synth = cfg.data.synth;
  if (synth.task.empty()) return;
  const auto& tasks = data::synth_task_names();
  if (std::find(tasks.begin(), tasks.end(), synth.task) == tasks.end()) {  // also when its files exist already
    throw ConfigError(fmt::format("data.synth.task: unknown synthetic task '{}' (expected one of: {})", synth.task,
                                  fmt::join(tasks, ", ")),
                      "fix data.synth.task, or leave it empty to train on data.train's files");
  }
  if (ctx.rank != 0) return;
  auto generate = [&](const std::vector<DataSource>& sources, int64_t count, int64_t seed_offset) {
    if (sources.empty() || count <= 0 || std::filesystem::exists(sources.front().path)) return;
    data::write_synthetic(synth.task, count, static_cast<uint64_t>(synth.seed + seed_offset), sources.front().path);
    FT_LOG_INFO("generated {} synthetic '{}' samples into {}", count, synth.task, sources.front().path);
  };
  generate(cfg.data.train, synth.train_samples, 0);
  generate(cfg.data.eval, synth.eval_samples, 1000003);
}

// tokenizer.train_vocab_size > 0: the file a sentencepiece model is to be trained into at the first start,
// tokenizer.path (fill_derived_paths names one in the run directory when the config names none), or <path>/
// tokenizer.model for a name without an extension (a directory). Nothing when tokenizer.path exists (given, or
// trained by an earlier start) or the tokenizer comes with model.path. Decided before anything is trained, so
// every rank decides alike.
std::optional<std::filesystem::path> tokenizer_to_train(const Config& cfg) {
  namespace fs = std::filesystem;
  const auto& t = cfg.tokenizer;
  if (t.train_vocab_size <= 0) return std::nullopt;
  if (t.path.empty()) {
    FT_LOG_WARN(
        "tokenizer.train_vocab_size={} is not used: the tokenizer of model.path comes with its weights (set "
        "tokenizer.path to train one elsewhere)",
        t.train_vocab_size);
    return std::nullopt;
  }
  if (fs::exists(t.path)) return std::nullopt;
  fs::path file = fs::absolute(t.path);
  if (!file.has_extension()) file /= "tokenizer.model";
  return file;
}

// Trains the tokenizer of tokenizer_to_train into `file` unless it is there.
void train_tokenizer_into(const Config& cfg, const std::filesystem::path& file) {
  namespace fs = std::filesystem;
  if (fs::exists(file)) return;
  const auto& t = cfg.tokenizer;
  std::vector<fs::path> inputs;
  for (const auto& source : cfg.data.train) inputs.emplace_back(source.path);
  data::TokenizerTrainOptions options;
  options.fields = cfg.data.fields;
  const auto dataset = data::DatasetOptions::from_config(cfg, /*eval=*/false);
  options.dataset = &dataset;
  options.write_vocab = false;  // the run reads tokenizer.model only
  const std::string model_type = name_of(t.train_model_type);
  data::train_tokenizer(inputs, t.train_vocab_size, model_type, file.parent_path(), options);
  if (file.filename() != "tokenizer.model") fs::rename(file.parent_path() / "tokenizer.model", file);
  FT_LOG_INFO("trained a {}-piece {} tokenizer into {}", t.train_vocab_size, model_type, file.string());
}

}  // namespace

namespace {

// run.overwrite sets an earlier run aside (deleted once the new run has trained); without it a run that would start
// at step 0 refuses a directory holding one (train/run_dir.h). Decided before anything is written. `auto` with
// checkpoints that all fail verification is refused later, by the Trainer's resume (verifying reads every file).
EarlierRunSetAside claim_run_dir(const Config& cfg, const RunContext& ctx) {
  const std::filesystem::path run_dir = cfg.run.output_dir;
  EarlierRunSetAside earlier_set_aside;
  if (ctx.rank == 0) {
    const auto restored = EarlierRunSetAside::restore_left_behind(run_dir);
    if (!restored.empty()) {
      FT_LOG_WARN(
          "run.overwrite: a run killed before it started training left the earlier run's {} set aside; "
          "put back",
          fmt::join(restored, ", "));
    }
    if (cfg.run.overwrite) earlier_set_aside = EarlierRunSetAside::take(cfg);
  }
  // The other ranks look at the run directory (an earlier run, a trained tokenizer) once rank 0 has settled it.
  ctx.comm->barrier();
  if (cfg.run.overwrite) return earlier_set_aside;
  if (cfg.checkpoint.resume.mode == ResumeSetting::Mode::kPath) return {};
  const auto earlier = earlier_run(run_dir);
  if (!earlier.empty() && cfg.checkpoint.resume.mode == ResumeSetting::Mode::kNever) {
    refuse_new_run(run_dir, earlier, "checkpoint.resume is never");
  }
  if (!earlier.empty() && ckpt::CheckpointStore::list(run_dir).empty()) {
    refuse_new_run(run_dir, earlier, "it holds no checkpoint to resume from");
  }
  return {};
}

}  // namespace

PreparedRun prepare_run(Config& cfg, const RunContext& ctx) {
  const std::filesystem::path run_dir = cfg.run.output_dir;
  PreparedRun prepared;
  if (ctx.rank == 0) prepared.lock = RunDirLock(run_dir);
  prepared.earlier_run = claim_run_dir(cfg, ctx);
  if (ctx.rank == 0) {
    std::filesystem::create_directories(run_dir);
    log::add_file_sink((run_dir / "train.log").string());
  }
  if (const auto& moved = prepared.earlier_run.names(); !moved.empty()) {
    FT_LOG_INFO("run.overwrite: set the earlier run's {} aside, to delete after this run's first step",
                fmt::join(moved, ", "));
  }
  if (cfg.run.deterministic) {
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    at::globalContext().setBenchmarkCuDNN(false);
  }
  FT_LOG_INFO("run directory {} on {} (rank {}/{})", run_dir.string(), ctx.device.str(), ctx.rank, ctx.world_size);
  prepare_inputs(cfg, ctx);
  return prepared;
}

void prepare_inputs(Config& cfg, const RunContext& ctx) {
  config::fill_derived_paths(cfg);
  generate_synthetic_data(cfg, ctx);
  const auto tokenizer_file = tokenizer_to_train(cfg);
  ctx.comm->barrier();  // the data is written and every rank has decided before the tokenizer trains on it
  if (tokenizer_file) {
    if (ctx.rank == 0) train_tokenizer_into(cfg, *tokenizer_file);
    cfg.tokenizer.path = tokenizer_file->string();
    ctx.comm->barrier();
  }
}

std::unique_ptr<tok::Tokenizer> build_tokenizer(const Config& cfg) {
  // An empty tokenizer.path means model.path: Tokenizer::load picks the file in the model directory.
  const std::filesystem::path file = cfg.tokenizer.path.empty() ? cfg.model.path : cfg.tokenizer.path;
  auto tokenizer = tok::Tokenizer::load(file, std::filesystem::path(cfg.model.path));
  if (!cfg.tokenizer.add_tokens.empty()) {
    const auto& tokens = cfg.tokenizer.add_tokens;
    const auto ids = tokenizer->add_tokens(tokens);
    std::vector<std::string> added, existing;
    for (size_t i = 0; i < tokens.size(); ++i) {
      (ids[i].created ? added : existing).push_back(fmt::format("{} #{}", tokens[i], ids[i].id));
    }
    FT_LOG_INFO("tokenizer.add_tokens: {} new ({}){}", added.size(), fmt::join(added, ", "),
                existing.empty()
                    ? std::string()
                    : fmt::format("; already in the vocabulary, now special: {}", fmt::join(existing, ", ")));
  }
  FT_LOG_INFO("tokenizer: {} ({}, {} tokens; bos {}, eos {}, pad {})", tokenizer->model_file().string(),
              tokenizer->kind(), tokenizer->vocab_size(), tokenizer->bos_id(), tokenizer->eos_id(),
              tokenizer->pad_id());
  return tokenizer;
}

namespace {

// The ids tokenizer.add_tokens created (not those the vocabulary already had).
std::vector<int64_t> created_token_ids(const tok::Tokenizer& tokenizer) {
  std::vector<int64_t> created;
  for (const auto& t : tokenizer.added_tokens()) {
    if (t.created) created.push_back(t.id);
  }
  return created;
}

// FP8 GEMMs (model.quantize: fp8, model.nf4_compute: fp8, train.fp8) where they cannot run: refused on CUDA
// (fp8_gemm_refusal), logged on the CPU, where the F32 emulation serves tests and small runs.
void check_fp8_gemms(const Config& cfg, const PrecisionPolicy& precision, c10::Device device) {
  std::string setting;
  if (cfg.model.quantize == BaseQuantization::kFp8) setting = "model.quantize: fp8";
  if (cfg.model.nf4_compute == Nf4Compute::kFp8) setting = "model.nf4_compute: fp8";
  if (cfg.train.fp8 != Fp8Training::kOff) setting = std::string("train.fp8: ") + name_of(cfg.train.fp8);
  if (setting.empty()) return;
  if (!device.is_cuda()) {
    FT_LOG_WARN(
        "{} on {}: the FP8 GEMMs are emulated in F32 (exact, but slow: FP8 GEMMs need a CUDA GPU of compute "
        "capability 8.9 or later)",
        setting, device.str());
    return;
  }
  int capability = 0;
#ifdef FT_WITH_CUDA
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index());
  capability = prop->major * 10 + prop->minor;
#endif
  const bool kernels = cfg.train.fused_kernels && model::KernelPolicy::built_with_kernels();
  if (const std::string why = fp8_gemm_refusal(setting, precision, capability, kernels); !why.empty()) {
    std::string hint =
        "use model.quantize: nf4 (or none), or train.precision: bf16 with train.fused_kernels: true on "
        "an FP8-capable GPU";
    if (cfg.train.fp8 != Fp8Training::kOff) {
      hint = "set train.fp8: off, or train.fused_kernels: true on an FP8-capable GPU";
    } else if (cfg.model.nf4_compute == Nf4Compute::kFp8) {
      hint =
          "set model.nf4_compute: dtype, or train.precision: bf16 with train.fused_kernels: true on an "
          "FP8-capable GPU";
    }
    throw ConfigError(why, hint);
  }
}

}  // namespace

model::ModelArgs model_shape(const Config& cfg, int64_t vocab_size) {
  if (cfg.model.path.empty()) return model::args_from_config(cfg.model, vocab_size);
  // Drawn weights have no vision tower to keep: a multimodal checkpoint's language model trains and saves alone.
  return model::language_model_only(model::load_hf_config(cfg.model.path));
}

model::ModelArgs build_model_args(const Config& cfg, const tok::Tokenizer& tokenizer,
                                  const PrecisionPolicy& precision) {
  model::ModelArgs args = model_shape(cfg, tokenizer.vocab_size());
  if (cfg.model.path.empty()) {
    // The saved config.json and generation_config.json name them, so transformers' generate stops at EOS too.
    model::fill_special_token_ids(args, tokenizer.bos_id(), tokenizer.eos_id(), tokenizer.pad_id());
  } else {
    args.torch_dtype = model::dtype_name(precision.param);
  }
  return args;
}

std::shared_ptr<model::Transformer> build_base_model(const Config& cfg, const tok::Tokenizer& tokenizer,
                                                     const PrecisionPolicy& precision, const RunContext& ctx,
                                                     model::RoundingResiduals* residuals) {
  check_fp8_gemms(cfg, precision, ctx.device);
  if (cfg.model.path.empty() && cfg.model.vocab_size > 0 && cfg.model.vocab_size < tokenizer.vocab_size()) {
    throw ConfigError(fmt::format("model.vocab_size: {} embedding rows for a tokenizer of {} tokens (its ids would "
                                  "index past the embedding)",
                                  cfg.model.vocab_size, tokenizer.vocab_size()),
                      "raise model.vocab_size to at least the tokenizer's size, or leave it 0 to take that size");
  }
  const auto seed = static_cast<uint64_t>(cfg.run.seed);
  at::manual_seed(seed);
  std::shared_ptr<model::Transformer> m;
  if (!cfg.model.path.empty() && !cfg.model.random_weights) {
    m = model::load_pretrained(cfg.model.path, ctx.device, precision.param, cfg.model.quantize, residuals);
  } else {  // from the model.* dimensions, or model.path's config.json with weights drawn (model.random_weights)
    m = std::make_shared<model::Transformer>(build_model_args(cfg, tokenizer, precision));
    model::init_weights(*m, cfg.model.init_std, seed, ctx.device, precision.param, cfg.model.quantize, residuals);
    m->to(ctx.device, precision.param);  // the buffers: the parameters are there already
  }
  if (cfg.data.seq_len > m->args().max_position_embeddings) {
    FT_LOG_WARN(
        "data.seq_len {} exceeds the model's max_position_embeddings {}: positions past it were never "
        "trained (lower data.seq_len, or extend the context with rope scaling)",
        cfg.data.seq_len, m->args().max_position_embeddings);
  }
  // tokenizer.add_tokens: the new tokens get rows, the mean of the old ones (as transformers'
  // resize_token_embeddings), in the embedding and the LM head; under LoRA those rows are trained too.
  const std::vector<int64_t> created = created_token_ids(tokenizer);
  const int64_t old_vocab = m->args().vocab_size;
  const int64_t vocab = std::max(old_vocab, tokenizer.vocab_size());
  // A model trained from scratch was built with rows for them (random, like every other row).
  if (!created.empty() && (!cfg.model.path.empty() || vocab > old_vocab)) {
    // mean_rows: new ids inside the old matrices of a pretrained model (a padded vocabulary); fresh: all rows that
    // start as the mean.
    std::vector<int64_t> mean_rows, fresh;
    for (int64_t id : created) {
      if (id < old_vocab && !cfg.model.path.empty()) mean_rows.push_back(id);
      if (id >= old_vocab || !cfg.model.path.empty()) fresh.push_back(id);
    }
    m->resize_token_embeddings(vocab, mean_rows);
    FT_LOG_INFO(
        "tokenizer.add_tokens: embedding and LM head{} from {} to {} rows; rows {} start as the mean of the "
        "old rows{}",
        m->args().tie_word_embeddings ? " (tied)" : "", old_vocab, vocab, fmt::join(fresh, ", "),
        cfg.lora.enabled ? " and are trained with the adapters" : "");
  }
  return m;
}

void seed_rank_generators(const Config& cfg, const RunContext& ctx) {
  at::manual_seed(static_cast<uint64_t>(cfg.run.seed) + 7919ull * static_cast<uint64_t>(ctx.rank + 1));
}

std::vector<std::string> configure_model(model::Transformer& m, const Config& cfg,
                                         const std::vector<int64_t>& created) {
  if (cfg.lora.enabled) model::apply_lora(m, cfg.lora, static_cast<uint64_t>(cfg.run.seed));
  if (cfg.lora.enabled && !created.empty()) m.add_token_rows(created);
  std::vector<std::string> left;
  if (cfg.model.nf4_compute != Nf4Compute::kDtype) left = model::set_nf4_compute(m, cfg.model.nf4_compute);
  if (cfg.train.fp8 != Fp8Training::kOff) {
    left = model::enable_fp8_training(m, cfg.train.fp8,
                                      {cfg.train.fp8_skip, cfg.train.fp8_edge_layers, cfg.train.fp8_min_features});
  }
  m.set_activation_checkpointing(cfg.model.activation_checkpointing);
  m.set_activation_offload(cfg.model.activation_offload);
  return left;
}

namespace {

// One line: how many projections train in FP8, and which stay bf16 and why.
void log_fp8_projections(const model::Transformer& m, const TrainConfig& train, const std::vector<std::string>& left) {
  const auto projections = m.projections();
  const auto in_fp8 = std::count_if(projections.begin(), projections.end(),
                                    [](const auto& p) { return p.second->fp8_training != Fp8Training::kOff; });
  const auto edge = model::fp8_edge_layers(m.args().num_layers, train.fp8_edge_layers);
  std::string bf16;
  if (!edge.empty()) {
    bf16 +=
        fmt::format("; layers {} in bf16 (train.fp8_edge_layers: {})", fmt::join(edge, ", "), train.fp8_edge_layers);
  }
  if (!left.empty()) {
    bf16 += fmt::format("; in bf16 by train.fp8_skip, train.fp8_min_features or a size not a multiple of 16: {}",
                        fmt::join(left, ", "));
  }
  if (in_fp8 == 0) {  // a setting that changes nothing is a mistake more often than not
    FT_LOG_WARN("train.fp8: {}: no projection trains with FP8 GEMMs{}", name_of(train.fp8), bf16);
    return;
  }
  FT_LOG_INFO("train.fp8: {}: {} of {} projections train with FP8 GEMMs{}", name_of(train.fp8), in_fp8,
              projections.size(), bf16);
}

}  // namespace

ModelParts build_model(const Config& cfg, const tok::Tokenizer& tokenizer, const PrecisionPolicy& precision,
                       const RunContext& ctx) {
  ModelParts parts;
  // A full fine-tune with Kahan summation keeps what casting F32 weights to bf16/fp16 dropped (only such casts
  // leave anything: model::RoundingResiduals).
  const bool kahan = cfg.optimizer.kahan_summation && !cfg.lora.enabled;
  std::shared_ptr<model::Transformer> m =
      build_base_model(cfg, tokenizer, precision, ctx, kahan ? &parts.rounding_residuals : nullptr);
  const auto left = configure_model(*m, cfg, created_token_ids(tokenizer));
  if (cfg.train.fp8 != Fp8Training::kOff) log_fp8_projections(*m, cfg.train, left);
  if (cfg.model.nf4_compute == Nf4Compute::kFp8) {
    const auto projections = m->projections();
    FT_LOG_INFO("model.nf4_compute: fp8: the GEMMs of {} NF4 projections run in FP8{}",
                std::count_if(projections.begin(), projections.end(),
                              [](const auto& p) { return p.second->nf4_compute == Nf4Compute::kFp8; }),
                left.empty() ? std::string()
                             : fmt::format("; in {} (sizes not multiples of 16): {}", name_of(cfg.train.precision),
                                           fmt::join(left, ", ")));
  }
  if (cfg.model.activation_offload) {
    FT_LOG_INFO("model.activation_offload: {}",
                ctx.device.is_cuda() ? "layer inputs wait in pinned host memory" : "no effect on the CPU");
  }
  m->train();
  int64_t trainable_count = 0;
  int64_t total_count = 0;
  int64_t quantized_count = 0;  // quantized weights are no parameters
  for (const auto& [path, lin] : m->projections()) quantized_count += lin->quantized_numel();
  for (const auto& [path, experts] : m->moe_experts()) quantized_count += experts->quantized_numel();
  total_count += quantized_count;
  for (const auto& item : m->named_parameters()) {
    total_count += item.value().numel();
    if (!item.value().requires_grad()) continue;
    parts.trainable.emplace_back(item.key(), item.value());
    trainable_count += item.value().numel();
  }
  // Dropout and sampling differ per rank; weights were initialised identically above.
  seed_rank_generators(cfg, ctx);

  const auto& args = m->args();
  parts.flops_per_token = metrics::flops_per_token(
      metrics::FlopsModel::of(args, cfg.data.seq_len, cfg.lora.enabled, cfg.lora.enabled ? trainable_count : 0));
  parts.peak_tflops = metrics::peak_tflops(device_name(ctx.device), cfg.logging.peak_tflops);
  FT_LOG_INFO("model: {} layers, hidden {}, {} heads ({} kv), vocab {}; {:.2f}M parameters{}, {:.2f}M trainable{}",
              args.num_layers, args.hidden_size, args.num_heads, args.num_kv_heads, args.vocab_size,
              static_cast<double>(total_count) / 1e6,
              quantized_count > 0 ? fmt::format(" ({:.2f}M in {})", static_cast<double>(quantized_count) / 1e6,
                                                cfg.model.quantize == BaseQuantization::kNf4 ? "NF4" : "FP8")
                                  : "",
              static_cast<double>(trainable_count) / 1e6, cfg.lora.enabled ? " (LoRA)" : "");
  parts.model = std::move(m);
  return parts;
}

namespace {

// train.epochs' optimizer steps: whole accumulations of the epochs' micro-batches per rank (steps run across the
// epochs' boundaries, so what is left over is fewer than grad_accum_steps micro-batches an epoch, said in the log).
int64_t steps_of_epochs(const Config& cfg, int64_t batches_per_epoch) {
  const int64_t accum = cfg.train.grad_accum_steps, steps = batches_per_epoch / accum;
  if (steps == 0) {
    throw ConfigError(fmt::format("train.grad_accum_steps: one epoch holds {} micro-batch(es) per rank, fewer than "
                                  "the {} an optimizer step accumulates",
                                  batches_per_epoch, accum),
                      "lower train.grad_accum_steps or train.micro_batch_size, add data, or set train.max_steps");
  }
  const int64_t unused = (batches_per_epoch - steps * accum) * cfg.train.epochs;
  if (unused > 0) {
    FT_LOG_INFO(
        "train.epochs={}: {} micro-batch(es) per rank an epoch make {} optimizer step(s) of {}; the run's last "
        "{} micro-batch(es) are not trained on",
        cfg.train.epochs, batches_per_epoch, steps, accum, unused);
  }
  return steps * cfg.train.epochs;
}

}  // namespace

DataParts build_data(const Config& cfg, const tok::Tokenizer& tokenizer, const RunContext& ctx,
                     const PreparePairs& prepare_pairs) {
  DataParts parts;
  if (cfg.train.objective != TrainObjective::kSft) {
    const auto chat = data::preference_chat(cfg, tokenizer);
    const auto options = data::preference_options(cfg, chat.get());
    auto read = [&](const char* which, const std::vector<DataSource>& sources) {
      auto pairs = data::PreferenceDataset::build(sources, options, cfg.data.on_error, tokenizer);
      FT_LOG_INFO("{} data: {}", which, pairs->stats().dump());
      if (prepare_pairs) prepare_pairs(*pairs);
      return pairs;
    };
    parts.train_set = read("train", cfg.data.train);
    if (!cfg.data.eval.empty()) parts.eval_set = read("eval", cfg.data.eval);
  } else {
    auto train = data::TokenizedDataset::build(data::DatasetOptions::from_config(cfg, /*eval=*/false), tokenizer);
    log_dataset_stats("train", train->stats());
    for (const auto& source : train->stats().sources) parts.train_content.push_back(source.content);
    parts.train_set = std::move(train);
    if (!cfg.data.eval.empty()) {
      auto eval = data::TokenizedDataset::build(data::DatasetOptions::from_config(cfg, /*eval=*/true), tokenizer);
      log_dataset_stats("eval", eval->stats());
      parts.eval_set = std::move(eval);
    }
  }
  parts.train_loader =
      std::make_unique<data::DataLoader>(parts.train_set, loader_options(cfg, tokenizer, ctx, cfg.data.shuffle));
  const auto& loader = *parts.train_loader;
  if (loader.rows_per_rank() < cfg.train.micro_batch_size) {
    FT_LOG_WARN(
        "data.train gives each rank {} row(s) per epoch, fewer than train.micro_batch_size={}: every micro-batch "
        "holds only those rows (lower train.micro_batch_size, or add data)",
        loader.rows_per_rank(), cfg.train.micro_batch_size);
  }
  parts.total_steps = cfg.train.max_steps > 0 ? cfg.train.max_steps : steps_of_epochs(cfg, loader.batches_per_epoch());
  if (cfg.train.max_steps == 0 && cfg.scheduler.warmup_steps > parts.total_steps) {
    // With max_steps the config check refuses this; train.epochs' step count is known only now.
    FT_LOG_WARN(
        "scheduler.warmup_steps={} is longer than the run's {} steps (train.epochs={}): the learning rate "
        "never reaches optimizer.lr",
        cfg.scheduler.warmup_steps, parts.total_steps, cfg.train.epochs);
  }
  return parts;
}

data::LoaderOptions loader_options(const Config& cfg, const tok::Tokenizer& tokenizer, const RunContext& ctx,
                                   bool shuffle) {
  auto options = data::LoaderOptions::from_config(cfg, tokenizer.pad_id(), ctx.rank, ctx.world_size,
                                                  ctx.device.is_cuda(), shuffle);
  if (cfg.train.objective != TrainObjective::kSft) options.seq_len = 2 * cfg.data.seq_len;
  return options;
}

namespace {

// optimizer.name adamw_8bit: how many tensors and elements take 8-bit moments (the rest keep their usual ones).
void log_8bit_moments(const std::vector<std::pair<std::string, at::Tensor>>& trainable) {
  int64_t tensors = 0, elements = 0, total = 0;
  for (const auto& [name, param] : trainable) {
    total += param.numel();
    if (!optim::takes_8bit_moments(name, param)) continue;
    ++tensors;
    elements += param.numel();
  }
  FT_LOG_INFO(
      "optimizer: adamw_8bit: 8-bit moments for {} of {} trainable tensors ({:.1f}% of the elements); "
      "tensors under {} elements and embeddings keep full-size ones",
      tensors, trainable.size(), 100.0 * static_cast<double>(elements) / std::max<double>(1.0, total),
      optim::kEightBitMinNumel);
}

}  // namespace

OptimizerParts build_optimizer(const Config& cfg, const std::vector<std::pair<std::string, at::Tensor>>& trainable,
                               int64_t total_steps, const RunContext& ctx, bool cuda_kernels) {
  OptimizerParts parts;
  auto opts = optim::AdamWOptions::from_config(cfg.optimizer);
  opts.cuda_kernels = cuda_kernels;
  if (cfg.distributed.zero == 1 && ctx.world_size > 1) {
    // ZeRO-1: this rank's optimizer holds only the parameters it owns (dist/zero.h), balanced by the bytes of their
    // state: a tensor with 8-bit moments holds a quarter of what one with full-size moments does.
    std::vector<int64_t> numels, state_costs;
    for (const auto& [name, param] : trainable) {
      numels.push_back(param.numel());
      const bool quarter = opts.eight_bit_moments && optim::takes_8bit_moments(name, param);
      state_costs.push_back(quarter ? (param.numel() + 3) / 4 : param.numel());
    }
    parts.zero_owners = dist::assign_owners(state_costs, ctx.world_size);
    std::vector<optim::NamedParam> owned;
    int64_t owned_numel = 0;
    for (size_t i = 0; i < trainable.size(); ++i) {
      if (parts.zero_owners[i] != ctx.rank) continue;
      owned.push_back(trainable[i]);
      owned_numel += trainable[i].second.numel();
    }
    FT_LOG_INFO(
        "ZeRO-1: optimizer state for {} of {} trainable tensors ({:.1f}% of the elements) on this rank", owned.size(),
        trainable.size(),
        100.0 * static_cast<double>(owned_numel) /
            std::max<double>(1.0, static_cast<double>(std::accumulate(numels.begin(), numels.end(), int64_t{0}))));
    parts.optimizer = std::make_unique<optim::AdamW>(owned, opts);
  } else {
    parts.optimizer = std::make_unique<optim::AdamW>(trainable, opts);
  }

  if (opts.eight_bit_moments) log_8bit_moments(trainable);
  parts.schedule = std::make_unique<optim::LrSchedule>(optim::ScheduleOptions::from_config(cfg, total_steps));
  return parts;
}

std::unique_ptr<optim::GradScaler> build_scaler(const Config& cfg, const PrecisionPolicy& precision,
                                                c10::Device device) {
  return std::make_unique<optim::GradScaler>(optim::GradScalerOptions::from_config(cfg.train, precision.loss_scaling),
                                             device);
}

std::unique_ptr<metrics::MetricsLogger> build_metrics(const Config& cfg, int64_t total_steps, int rank) {
  if (rank != 0) return nullptr;
  return std::make_unique<metrics::MetricsLogger>(cfg.run.output_dir,
                                                  metrics::MetricsOptions::from_config(cfg, total_steps));
}

std::unique_ptr<ckpt::CheckpointWriter> build_checkpoints(const Config& cfg, const RunContext& ctx, bool sharded) {
  const auto opts = ckpt::CheckpointWriterOptions::from_config(cfg, ctx.device, sharded);
  auto store = std::make_unique<ckpt::CheckpointStore>(
      cfg.run.output_dir, ckpt::CheckpointStoreOptions{cfg.checkpoint.keep_last, cfg.checkpoint.keep_best});
  return std::make_unique<ckpt::CheckpointWriter>(std::move(store), ctx.comm, ctx.rank, ctx.world_size, opts);
}

std::unique_ptr<metrics::StepProfiler> build_profiler(const Config& cfg, const RunContext& ctx) {
  return std::make_unique<metrics::StepProfiler>(cfg.train.profile_start_step, cfg.train.profile_steps,
                                                 std::filesystem::path(cfg.run.output_dir) / "profile", ctx.rank,
                                                 ctx.device);
}

std::unique_ptr<dist::DistributedDataParallel> build_ddp(
    const Config& cfg, const std::vector<std::pair<std::string, at::Tensor>>& trainable,
    const PrecisionPolicy& precision, const RunContext& ctx) {
  if (ctx.world_size <= 1) return nullptr;
  std::vector<at::Tensor> params;
  params.reserve(trainable.size());
  for (const auto& [name, param] : trainable) params.push_back(param);
  return std::make_unique<dist::DistributedDataParallel>(
      *ctx.comm, std::move(params), dist::DdpOptions::from_config(cfg.distributed, precision.reduce));
}

}  // namespace ft::train

// The typed configuration: one struct per YAML section, each field with its default and a one-line comment.
// docs/configuration.md documents the same schema; tests/config keeps the two in step.
// Each section's visit() names its keys for the loader (config/loader.h), which binds, validates and prints them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/settings.h"

namespace ft {

// What a key means to a run resumed from a checkpoint. Each section's visit() marks the keys that must match; the
// resume fingerprint (config/resume_keys.h, train/fingerprint.h) and its refusal text derive from the marks.
enum class OnResume {
  kMayChange,  // a resumed run may use a new value (learning rate, schedule, max_steps, evaluation, logging, ...)
  kMustMatch,  // shapes the weights, the optimizer state or the meaning of the saved data position
};
constexpr OnResume kMustMatch = OnResume::kMustMatch;

struct RunConfig {
  std::string name = "run";                      // run name; usable as ${run.name}
  std::string output_dir = "runs/${run.name}";   // run directory: resolved config, metrics, checkpoints, model
  int64_t seed = 1234;                           // seed for weight init, data order, dropout and sampling
  DeviceSetting device;                          // auto | cpu | cuda | cuda:N
  bool deterministic = false;                    // bit-reproducible runs (deterministic kernels, fixed threads)
  bool overwrite = false;  // a run starting at step 0 replaces an earlier run's files in output_dir

  template <class V> void visit(V& v) {
    v("name", name);
    v("output_dir", output_dir);
    v("seed", seed);
    v("device", device);
    v("deterministic", deterministic);
    v("overwrite", overwrite);
  }
};

struct ModelConfig {
  std::string path;                        // Hugging Face model dir (config.json + safetensors); empty = from scratch
  // from scratch: llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3_text | qwen3_moe | mixtral
  ModelFamily architecture = ModelFamily::kLlama;
  int64_t vocab_size = 0;                  // from scratch: 0 = the tokenizer's vocabulary size
  int64_t hidden_size = 256;               // from scratch: model width
  int64_t intermediate_size = 688;         // from scratch: SwiGLU hidden width
  int64_t num_layers = 4;                  // from scratch: decoder layers
  int64_t num_heads = 4;                   // from scratch: attention heads
  int64_t num_kv_heads = 4;                // from scratch: key/value heads (grouped-query attention when fewer)
  int64_t max_position_embeddings = 2048;  // from scratch: longest sequence the rotary tables cover
  double rope_theta = 10000.0;             // from scratch: rotary base
  double rms_norm_eps = 1e-5;              // from scratch: RMSNorm epsilon
  bool tie_embeddings = false;             // from scratch: LM head shares the embedding matrix
  double init_std = 0.02;                  // from scratch: normal init standard deviation
  ModelDType dtype = ModelDType::kFp32;   // parameter dtype: fp32 | bf16
  bool activation_checkpointing = false;   // recompute each decoder layer in backward to save memory
  bool activation_offload = false;         // with activation_checkpointing: keep the layer inputs in pinned host memory
  int64_t num_experts = 8;                 // from scratch, qwen3_moe / mixtral: experts per MoE layer
  int64_t num_experts_per_tok = 2;         // from scratch, qwen3_moe / mixtral: experts each token is routed to
  int64_t moe_intermediate_size = 0;       // from scratch, qwen3_moe: experts' SwiGLU width (0 = intermediate_size)
  // MoE: add the router's load-balancing loss to the training loss: auto (config.json's output_router_logits) | on | off
  RouterAuxLoss router_aux_loss = RouterAuxLoss::kAuto;
  // frozen projections and MoE experts under LoRA: none | nf4 (4-bit, QLoRA) | fp8 (e4m3, row scales; sm_89+)
  BaseQuantization quantize = BaseQuantization::kNone;
  // NF4 projections' GEMMs: dtype (dequantized to the compute dtype, as bitsandbytes) | fp8 (e4m3; not MoE experts)
  Nf4Compute nf4_compute = Nf4Compute::kDtype;
  bool random_weights = false;  // with model.path: its config.json only, the weights drawn (init_std) instead of read

  template <class V> void visit(V& v) {
    v("path", path);
    v("architecture", architecture);
    v("vocab_size", vocab_size);
    v("hidden_size", hidden_size);
    v("intermediate_size", intermediate_size);
    v("num_layers", num_layers);
    v("num_heads", num_heads);
    v("num_kv_heads", num_kv_heads);
    v("max_position_embeddings", max_position_embeddings);
    v("rope_theta", rope_theta);
    v("rms_norm_eps", rms_norm_eps);
    v("tie_embeddings", tie_embeddings);
    v("init_std", init_std);
    v("dtype", dtype);
    v("activation_checkpointing", activation_checkpointing);
    v("activation_offload", activation_offload);
    v("num_experts", num_experts);
    v("num_experts_per_tok", num_experts_per_tok);
    v("moe_intermediate_size", moe_intermediate_size);
    v("router_aux_loss", router_aux_loss);
    v("quantize", quantize, kMustMatch);
    v("nf4_compute", nf4_compute);
    v("random_weights", random_weights, kMustMatch);
  }
};

struct LoraConfig {
  bool enabled = false;                                       // train low-rank adapters instead of all weights
  int64_t rank = 8;                                           // adapter rank r
  double alpha = 16.0;                                        // scaling numerator: the update is (alpha / r) * B A x
  double dropout = 0.0;                                       // dropout on the adapter input
  std::vector<std::string> targets = {"q_proj", "v_proj"};  // projections that get adapters (names, paths, all-linear)

  template <class V> void visit(V& v) {
    v("enabled", enabled, kMustMatch);
    v("rank", rank, kMustMatch);
    v("alpha", alpha);
    v("dropout", dropout);
    v("targets", targets, kMustMatch);
  }
};

struct TokenizerConfig {
  std::string path;                 // tokenizer file or directory (tokenizer.json, sentencepiece or tiktoken tokenizer.model, tekken.json); empty = model.path
  int64_t train_vocab_size = 0;     // > 0: train a sentencepiece model on the training data at start
  TokenizerModel train_model_type = TokenizerModel::kBpe;  // trained model type: bpe | unigram
  bool add_bos = true;              // prepend BOS to every sample
  bool add_eos = true;              // append EOS to every completion / text sample
  std::vector<std::string> add_tokens;  // special tokens added to the vocabulary (new embedding/LM-head rows, trained)

  template <class V> void visit(V& v) {
    v("path", path);
    v("train_vocab_size", train_vocab_size);
    v("train_model_type", train_model_type);
    v("add_bos", add_bos);
    v("add_eos", add_eos);
    v("add_tokens", add_tokens, kMustMatch);
  }
};

// One JSON Lines (or pretokenized binary) source of samples.
struct DataSource {
  std::string path;                  // file path (relative paths are relative to the config file)
  SourceFormat format = SourceFormat::kPromptCompletion;  // text | prompt_completion | alpaca | chat | pretokenized | preference
  double weight = 1.0;               // sampling weight relative to the other sources

  template <class V> void visit(V& v) {
    v("path", path);
    v("format", format);
    v("weight", weight);
  }
};

// JSON field names, for datasets that name them differently.
struct DataFields {
  std::string text = "text";               // text format: the text
  std::string prompt = "prompt";           // prompt_completion: the prompt (alpaca: instruction)
  std::string input = "input";             // alpaca: optional input appended to the instruction
  std::string completion = "completion";   // prompt_completion: the completion (alpaca: output)
  std::string messages = "messages";       // chat: the list of turns
  std::string role = "role";               // chat: a turn's role (system | user | assistant)
  std::string content = "content";         // chat: a turn's text
  std::string chosen = "chosen";           // preference: the preferred completion (or whole conversation)
  std::string rejected = "rejected";       // preference: the other one

  template <class V> void visit(V& v) {
    v("text", text);
    v("prompt", prompt);
    v("input", input);
    v("completion", completion);
    v("messages", messages);
    v("role", role);
    v("content", content);
    v("chosen", chosen);
    v("rejected", rejected);
  }
};

// Synthetic task generation (finetune data synth), used by the demo.
struct SynthConfig {
  std::string task;          // empty = off; add | reverse | sort | ...: generate data.train/data.eval if missing
  int64_t train_samples = 0; // samples written to the first data.train source
  int64_t eval_samples = 0;  // samples written to the first data.eval source
  int64_t seed = 0;          // generator seed

  template <class V> void visit(V& v) {
    v("task", task);
    v("train_samples", train_samples);
    v("eval_samples", eval_samples);
    v("seed", seed);
  }
};

struct DataConfig {
  std::vector<DataSource> train;      // training sources
  std::vector<DataSource> eval;       // evaluation sources (optional)
  DataFields fields;                  // JSON field names
  ChatTemplateName template_name = ChatTemplateName::kAuto;  // chat template: auto (the model's own, else plain) | llama2 | llama3 | chatml | plain | gemma | mistral (v1/v3/tekken by the tokenizer) | mistral-v1 | mistral-v3 | mistral-tekken
  TrainOn train_on = TrainOn::kAll;     // chat with the model's template: loss on all | last assistant turn(s)
  std::vector<std::string> roles;       // chat: extra role names as name=role (role: system|user|assistant|tool)
  std::string system_prompt;            // chat: system message for conversations without one; empty = none
  int64_t seq_len = 512;              // tokens per row (packing) or longest sample kept
  bool packing = false;               // concatenate samples into seq_len rows (attention stays within a sample)
  bool shuffle = true;                // reshuffle the samples every epoch (false: file order, for reference runs)
  Overlong overlong = Overlong::kTruncate;  // samples longer than seq_len: truncate | drop
  OnError on_error = OnError::kFail;      // a bad line: fail | skip (counted and reported)
  TokenDType pretokenized_dtype = TokenDType::kUint16;  // pretokenized files: uint16 | uint32
  std::string cache_dir;              // tokenized cache; empty = $XDG_CACHE_HOME/finetune/data (~/.cache/...)
  int64_t prefetch = 4;               // batches prepared ahead by the background thread
  int64_t pad_to_multiple_of = 0;     // without packing: batch length rounded up to a multiple of this, at most seq_len (fewer shapes for cuDNN attention to plan); 0 = auto: 64 on CUDA, 1 on the CPU
  SynthConfig synth;                  // synthetic data generation

  template <class V> void visit(V& v) {
    v("train", train, kMustMatch);
    v("eval", eval);
    v("fields", fields);
    v("template", template_name, kMustMatch);
    v("train_on", train_on);
    v("roles", roles);
    v("system_prompt", system_prompt);
    v("seq_len", seq_len, kMustMatch);
    v("packing", packing, kMustMatch);
    v("shuffle", shuffle);
    v("overlong", overlong);
    v("on_error", on_error);
    v("pretokenized_dtype", pretokenized_dtype);
    v("cache_dir", cache_dir);
    v("prefetch", prefetch);
    v("pad_to_multiple_of", pad_to_multiple_of);
    v("synth", synth);
  }
};

struct TrainConfig {
  TrainObjective objective = TrainObjective::kSft;  // sft | dpo | ipo | simpo | orpo (preference pairs; see preference)
  int64_t max_steps = 0;           // optimizer steps; 0 = run train.epochs epochs
  int64_t epochs = 1;              // epochs when max_steps is 0
  int64_t micro_batch_size = 8;    // samples (rows) per forward/backward on each rank
  int64_t grad_accum_steps = 1;    // micro-batches per optimizer step
  Precision precision = Precision::kFp32;  // fp32 | bf16 (autocast, fp32 weights) | fp16 (loss scaling) | bf16-pure
  double grad_clip = 1.0;          // clip the global gradient norm to this; 0 = off
  int64_t max_nan_skips = 0;       // steps with a non-finite loss skipped before stopping (bf16/fp32)
  double loss_scale_init = 65536.0;     // fp16: initial loss scale
  int64_t loss_scale_interval = 2000;   // fp16: clean steps before the scale doubles
  bool fused_kernels = true;        // CUDA: fused RMSNorm, varlen flash attention (packing), chunked linear+CE
  Fp8Training fp8 = Fp8Training::kOff;  // full fine-tunes: decoder projections' GEMMs in FP8 (off|tensorwise|rowwise)
  std::vector<std::string> fp8_skip;    // train.fp8: projections left in bf16, by name part (e.g. down_proj, layers.0.)
  int64_t fp8_edge_layers = 1;          // train.fp8: decoder layers at each end of the stack left in bf16 (0: none)
  int64_t fp8_min_features = 0;     // train.fp8: projections with fewer input or output features left in bf16 (0: none)
  int64_t profile_start_step = 0;   // > 0: trace optimizer steps from this one into <run>/profile/ (Kineto)
  int64_t profile_steps = 3;        // steps traced from train.profile_start_step

  template <class V> void visit(V& v) {
    v("objective", objective, kMustMatch);
    v("max_steps", max_steps);
    v("epochs", epochs);
    v("micro_batch_size", micro_batch_size, kMustMatch);
    v("grad_accum_steps", grad_accum_steps, kMustMatch);
    v("precision", precision);
    v("grad_clip", grad_clip);
    v("max_nan_skips", max_nan_skips);
    v("loss_scale_init", loss_scale_init);
    v("loss_scale_interval", loss_scale_interval);
    v("fused_kernels", fused_kernels);
    v("fp8", fp8);
    v("fp8_skip", fp8_skip);
    v("fp8_edge_layers", fp8_edge_layers);
    v("fp8_min_features", fp8_min_features);
    v("profile_start_step", profile_start_step);
    v("profile_steps", profile_steps);
  }
};

// The preference objectives' settings (train.objective dpo | ipo | simpo | orpo), with TRL's defaults and names.
struct PreferenceConfig {
  double beta = 0.1;             // dpo, ipo (tau), simpo: the inverse temperature of the implicit reward
  double label_smoothing = 0.0;  // dpo, simpo: the share of flipped labels (dpo: cDPO, or robust DPO), in [0, 0.5)
  bool robust = false;           // dpo with label_smoothing: robust DPO's unbiased loss instead of cDPO's
  double simpo_gamma = 0.5;      // simpo: the target reward margin
  double orpo_lambda = 0.1;      // orpo: the weight of the odds-ratio term (TRL's ORPOConfig.beta)
  PairTruncation truncation = PairTruncation::kKeepStart;  // dpo/ipo pairs past data.seq_len: keep_start | keep_end
  bool precompute_ref_logps = false;  // dpo, ipo: reference log-probs in one pass before training (no frozen copy)

  template <class V> void visit(V& v) {
    v("beta", beta);
    v("label_smoothing", label_smoothing);
    v("robust", robust);
    v("simpo_gamma", simpo_gamma);
    v("orpo_lambda", orpo_lambda);
    v("truncation", truncation);
    v("precompute_ref_logps", precompute_ref_logps);
  }
};

struct OptimizerConfig {
  OptimizerName name = OptimizerName::kAdamW;  // adamw | adamw_8bit (8-bit moments, as bitsandbytes' AdamW8bit)
  double lr = 3e-4;                          // peak learning rate
  std::vector<double> betas = {0.9, 0.999};  // Adam beta1, beta2
  double eps = 1e-8;                         // Adam epsilon
  double weight_decay = 0.0;                 // decoupled weight decay
  bool decay_norms_and_biases = false;       // also decay norms, biases and embeddings
  bool kahan_summation = false;  // bf16 parameters: Kahan-compensated updates, F32 exp_avg_sq (fp32-quality steps); the compensation starts at what casting F32 weights to bf16 dropped

  template <class V> void visit(V& v) {
    v("name", name, kMustMatch);
    v("lr", lr);
    v("betas", betas);
    v("eps", eps);
    v("weight_decay", weight_decay);
    v("decay_norms_and_biases", decay_norms_and_biases);
    v("kahan_summation", kahan_summation, kMustMatch);
  }
};

struct SchedulerConfig {
  Schedule type = Schedule::kCosine;  // constant | linear | cosine | wsd (warmup-stable-decay)
  int64_t warmup_steps = 0;     // linear warmup steps (wins over warmup_ratio when > 0)
  double warmup_ratio = 0.0;    // warmup as a fraction of the total steps
  double min_lr_ratio = 0.0;    // floor of the decay, as a fraction of optimizer.lr
  double decay_ratio = 0.1;     // wsd: fraction of the steps spent decaying at the end

  template <class V> void visit(V& v) {
    v("type", type);
    v("warmup_steps", warmup_steps);
    v("warmup_ratio", warmup_ratio);
    v("min_lr_ratio", min_lr_ratio);
    v("decay_ratio", decay_ratio);
  }
};

// One turn of an eval prompt given as a conversation.
struct PromptTurn {
  std::string role;     // system | user | assistant
  std::string content;  // the turn's text

  bool operator==(const PromptTurn& o) const { return role == o.role && content == o.content; }
  template <class V> void visit(V& v) {
    v("role", role);
    v("content", content);
  }
};

// An eval prompt, written in YAML as a string or as a list of {role, content} turns ending with a user turn.
struct EvalPrompt {
  std::string text;                  // the prompt as a string (empty when given as turns)
  std::vector<PromptTurn> messages;  // the prompt as turns, prompted in the chat template (empty when a string)

  bool operator==(const EvalPrompt& o) const { return text == o.text && messages == o.messages; }
};

struct EvalConfig {
  int64_t every_steps = 0;              // evaluate every N optimizer steps (and at the end); 0 = at the end only
  int64_t max_batches = 0;              // cap on eval batches; 0 = the whole eval set
  int64_t exact_match_samples = 0;      // prompt_completion eval samples scored by greedy exact match
  int64_t max_new_tokens = 32;          // generation length for exact match and samples
  std::vector<EvalPrompt> prompts;      // prompts whose generations are logged at each evaluation: strings or turn lists
  PromptFormat prompt_format = PromptFormat::kAuto; // string prompts as: text | chat (a user turn in the chat template) | auto (chat when training on chat data)

  template <class V> void visit(V& v) {
    v("every_steps", every_steps);
    v("max_batches", max_batches);
    v("exact_match_samples", exact_match_samples);
    v("max_new_tokens", max_new_tokens);
    v("prompts", prompts);
    v("prompt_format", prompt_format);
  }
};

struct CheckpointConfig {
  int64_t every_steps = 0;      // save every N optimizer steps; 0 = only at the end
  int64_t keep_last = 2;        // checkpoints kept (older ones deleted); 0 = keep all
  bool keep_best = false;       // also keep the checkpoint with the lowest eval loss
  ResumeSetting resume;         // auto (newest valid in output_dir) | never | PATH
  int64_t shard_size_mb = 5000; // safetensors shard size for saved models, in MB (10^6 bytes, as transformers' "5GB")
  AsyncSave async = AsyncSave::kAuto;  // write checkpoints while training goes on: auto (on a GPU) | on | off

  template <class V> void visit(V& v) {
    v("every_steps", every_steps);
    v("keep_last", keep_last);
    v("keep_best", keep_best);
    v("resume", resume);
    v("shard_size_mb", shard_size_mb);
    v("async", async);
  }
};

struct LoggingConfig {
  LogLevel level = LogLevel::kInfo; // trace | debug | info | warn | error
  int64_t every_steps = 1;        // log metrics every N optimizer steps
  bool tensorboard = false;       // also write TensorBoard event files to <output_dir>/tb
  Progress progress = Progress::kAuto;  // progress bar: auto (when stderr is a terminal) | on | off
  double peak_tflops = 0.0;       // MFU denominator per GPU; 0 = from the table of known GPUs

  template <class V> void visit(V& v) {
    v("level", level);
    v("every_steps", every_steps);
    v("tensorboard", tensorboard);
    v("progress", progress);
    v("peak_tflops", peak_tflops);
  }
};

struct DistributedConfig {
  Backend backend = Backend::kAuto;  // auto (nccl on CUDA, gloo on CPU) | nccl | gloo
  int64_t timeout_s = 600;       // collective and rendezvous timeout
  double bucket_cap_mb = 25.0;   // DDP gradient bucket size
  ReduceDType reduce_dtype = ReduceDType::kFp32;  // gradient all-reduce precision: fp32 | bf16 (half the bytes, rounded sums)
  int64_t zero = 0;              // 0 = replicated optimizer state; 1 = sharded across ranks (ZeRO-1)

  template <class V> void visit(V& v) {
    v("backend", backend);
    v("timeout_s", timeout_s);
    v("bucket_cap_mb", bucket_cap_mb);
    v("reduce_dtype", reduce_dtype);
    v("zero", zero);
  }
};

struct Config {
  RunConfig run;
  ModelConfig model;
  LoraConfig lora;
  TokenizerConfig tokenizer;
  DataConfig data;
  TrainConfig train;
  PreferenceConfig preference;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  DistributedConfig distributed;

  template <class V> void visit(V& v) {
    v("run", run);
    v("model", model);
    v("lora", lora);
    v("tokenizer", tokenizer);
    v("data", data);
    v("train", train);
    v("preference", preference);
    v("optimizer", optimizer);
    v("scheduler", scheduler);
    v("eval", eval);
    v("checkpoint", checkpoint);
    v("logging", logging);
    v("distributed", distributed);
  }
};

}  // namespace ft

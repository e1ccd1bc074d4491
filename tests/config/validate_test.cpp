// Validation rules, one case per rule: enums, ranges, conflicts and files that must exist.
#include "config_test_util.h"

namespace ft::test {
namespace {

using ::testing::HasSubstr;

struct BadValue {
  BadValue(std::string o, std::string e, std::vector<std::string> before = {})
      : override_text(std::move(o)), expected(std::move(e)), first(std::move(before)) {}
  std::string override_text;       // key=value applied to the minimal config
  std::string expected;            // the error after "<override '...'>: "
  std::vector<std::string> first;  // valid overrides applied before it
};

void PrintTo(const BadValue& b, std::ostream* os) {
  *os << b.override_text;
}

// Runs in the temp dir: relative paths in overrides resolve against the current directory.
class ConfigRejects : public ConfigDir, public ::testing::WithParamInterface<BadValue> {
 protected:
  void SetUp() override {
    ConfigDir::SetUp();
    saved_ = std::filesystem::current_path();
    std::filesystem::current_path(dir_.path());
  }
  void TearDown() override { std::filesystem::current_path(saved_); }
  std::filesystem::path saved_;
};

TEST_P(ConfigRejects, ValueWithLocatedError) {
  const auto& p = GetParam();
  auto overrides = p.first;
  overrides.push_back(p.override_text);
  const auto msg = error_of(kMinimalConfig, overrides);
  EXPECT_THAT(msg, HasSubstr("<override '" + p.override_text + "'>: " + p.expected));
  EXPECT_THAT(msg, HasSubstr("(1 error)"));
}

INSTANTIATE_TEST_SUITE_P(
    BadEnums, ConfigRejects,
    ::testing::Values(
        BadValue{"run.device=gpu", "run.device: invalid value 'gpu' (expected one of: auto, cpu, cuda, cuda:N)"},
        BadValue{"run.device=cuda:x", "run.device: invalid value 'cuda:x'"},
        BadValue{"model.architecture=gpt2",
                 "model.architecture: invalid value 'gpt2' (expected one of: llama, "
                 "mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, qwen3_moe, mixtral)"},
        BadValue{"model.dtype=fp16", "model.dtype: invalid value 'fp16' (expected one of: fp32, bf16)"},
        BadValue{"tokenizer.train_model_type=wordpiece", "tokenizer.train_model_type: invalid value 'wordpiece'"},
        BadValue{"data.train=[{path: train.jsonl, format: csv}]",
                 "data.train[0].format: invalid value 'csv' (expected one of: text, prompt_completion, alpaca, chat, "
                 "pretokenized, preference)"},
        BadValue{"data.template=vicuna",
                 "data.template: invalid value 'vicuna' (expected one of: auto, llama2, llama3, "
                 "chatml, plain, gemma, mistral, mistral-v1, mistral-v3, mistral-tekken)"},
        BadValue{"tokenizer.add_tokens=[<x>, <x>]", "tokenizer.add_tokens[1]: '<x>' is listed twice"},
        BadValue{"tokenizer.add_tokens=['']", "tokenizer.add_tokens[0]: empty"},
        BadValue{"data.overlong=wrap", "data.overlong: invalid value 'wrap' (expected one of: truncate, drop)"},
        BadValue{"data.on_error=ignore", "data.on_error: invalid value 'ignore' (expected one of: fail, skip)"},
        BadValue{"data.pretokenized_dtype=int8", "data.pretokenized_dtype: invalid value 'int8'"},
        BadValue{"train.precision=fp8",
                 "train.precision: invalid value 'fp8' (expected one of: fp32, bf16, fp16, "
                 "bf16-pure)"},
        BadValue{"optimizer.name=sgd", "optimizer.name: invalid value 'sgd' (expected one of: adamw, adamw_8bit)"},
        BadValue{"scheduler.type=step",
                 "scheduler.type: invalid value 'step' (expected one of: constant, linear, "
                 "cosine, wsd)"},
        BadValue{"logging.level=loud", "logging.level: invalid value 'loud'"},
        BadValue{"logging.progress=yes-please",
                 "logging.progress: invalid value 'yes-please' (expected one of: "
                 "auto, on, off)"},
        BadValue{"distributed.backend=mpi",
                 "distributed.backend: invalid value 'mpi' (expected one of: auto, "
                 "nccl, gloo)"},
        BadValue{"distributed.zero=2", "distributed.zero: invalid value 2 (expected one of: 0, 1)"},
        BadValue{"lora.targets=[q_proj,lm_head]",
                 "lora.targets: invalid target 'lm_head' (expected all-linear, or a subset of: "
                 "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; "
                 "phi3: qkv_proj, o_proj, gate_up_proj, down_proj; qwen3_moe and mixtral: q_proj, "
                 "k_proj, v_proj, o_proj, gate_up_proj, down_proj, gate; or a module path ending in one, such as "
                 "model.layers.3.mlp.down_proj)"},
        BadValue{"lora.targets=[model.layers.0.mlp.act_fn]",
                 "lora.targets: invalid target 'model.layers.0.mlp.act_fn'"},
        BadValue{"lora.targets=[all-linear,q_proj]",
                 "lora.targets: all-linear adapts every projection; list nothing else with it"},
        BadValue{"lora.targets=[q_proj,q_proj]", "lora.targets: 'q_proj' is listed twice"}));

INSTANTIATE_TEST_SUITE_P(
    OutOfRange, ConfigRejects,
    ::testing::Values(
        BadValue{"optimizer.lr=0", "optimizer.lr: out of range (expected > 0, got 0)"},
        BadValue{"optimizer.lr=-1e-4", "optimizer.lr: out of range (expected > 0, got -0.0001)"},
        BadValue{"optimizer.betas=[0.9,1.0]", "optimizer.betas[1]: out of range (expected in [0, 1), got 1)"},
        BadValue{"optimizer.betas=[-0.1,0.9]", "optimizer.betas[0]: out of range (expected in [0, 1), got -0.1)"},
        BadValue{"optimizer.betas=[0.9,0.95,0.99]",
                 "optimizer.betas: expected exactly 2 values (beta1, beta2), "
                 "got 3"},
        BadValue{"optimizer.eps=0", "optimizer.eps: out of range (expected > 0, got 0)"},
        BadValue{"optimizer.weight_decay=-0.1", "optimizer.weight_decay: out of range (expected >= 0, got -0.1)"},
        BadValue{"train.micro_batch_size=0", "train.micro_batch_size: out of range (expected >= 1, got 0)"},
        BadValue{"train.grad_accum_steps=0", "train.grad_accum_steps: out of range (expected >= 1, got 0)"},
        BadValue{"data.seq_len=1", "data.seq_len: out of range (expected >= 2, got 1)"},
        BadValue{"data.pad_to_multiple_of=-1", "data.pad_to_multiple_of: out of range (expected >= 0, got -1)"},
        BadValue{"train.max_steps=-1", "train.max_steps: out of range (expected >= 0, got -1)"},
        BadValue{"train.epochs=0", "train.epochs: out of range (expected >= 1, got 0)"},
        BadValue{"train.grad_clip=-1", "train.grad_clip: out of range (expected >= 0, got -1)"},
        BadValue{"train.loss_scale_init=0", "train.loss_scale_init: out of range (expected > 0, got 0)"},
        BadValue{"lora.rank=0", "lora.rank: out of range (expected >= 1, got 0)"},
        BadValue{"lora.alpha=0", "lora.alpha: out of range (expected > 0, got 0)"},
        BadValue{"lora.dropout=1", "lora.dropout: out of range (expected in [0, 1), got 1)"},
        BadValue{"scheduler.warmup_ratio=1.5", "scheduler.warmup_ratio: out of range (expected in [0, 1], got 1.5)"},
        BadValue{"scheduler.min_lr_ratio=-0.5",
                 "scheduler.min_lr_ratio: out of range (expected in [0, 1], got "
                 "-0.5)"},
        BadValue{"scheduler.decay_ratio=2", "scheduler.decay_ratio: out of range (expected in [0, 1], got 2)"},
        BadValue{"checkpoint.keep_last=-1", "checkpoint.keep_last: out of range (expected >= 0, got -1)"},
        BadValue{"model.hidden_size=0", "model.hidden_size: out of range (expected >= 1, got 0)"},
        BadValue{"model.hidden_size=250", "model.hidden_size: must be a multiple of model.num_heads (4)"},
        BadValue{"model.num_kv_heads=3", "model.num_kv_heads: must divide model.num_heads (4)"},
        BadValue{"model.rms_norm_eps=0", "model.rms_norm_eps: out of range (expected > 0, got 0)"},
        BadValue{"data.train=[{path: train.jsonl, weight: 0}]",
                 "data.train[0].weight: out of range (expected > 0, got 0)"},
        BadValue{"data.fields.text=", "data.fields.text: empty (expected a JSON field name)"},
        BadValue{"eval.max_new_tokens=0", "eval.max_new_tokens: out of range (expected >= 1, got 0)"},
        BadValue{"logging.every_steps=0", "logging.every_steps: out of range (expected >= 1, got 0)"},
        BadValue{"distributed.timeout_s=0", "distributed.timeout_s: out of range (expected >= 1, got 0)"},
        BadValue{"distributed.bucket_cap_mb=0", "distributed.bucket_cap_mb: out of range (expected > 0, got 0)"}));

INSTANTIATE_TEST_SUITE_P(
    Conflicts, ConfigRejects,
    ::testing::Values(
        BadValue{"scheduler.warmup_steps=20",
                 "scheduler.warmup_steps: warmup (20 steps) is longer than "
                 "train.max_steps (10)",
                 {"train.max_steps=10"}},
        BadValue{"data.train=[]", "data.train: empty (expected at least one training source)"},
        BadValue{"lora.enabled=true", "lora.enabled: LoRA needs a pretrained model, but model.path is empty"},
        BadValue{"model.random_weights=true",
                 "model.random_weights: needs model.path, whose config.json gives the shape"},
        BadValue{"model.quantize=nf4",
                 "model.quantize: a quantized base is frozen and trains only through adapters; set "
                 "lora.enabled: true"},
        BadValue{"model.activation_offload=true",
                 "model.activation_offload: offloads the layer inputs that activation checkpointing "
                 "keeps; set model.activation_checkpointing: true"},
        BadValue{"model.nf4_compute=fp8",
                 "model.nf4_compute: fp8 sets the GEMMs of an NF4 base, and model.quantize is not nf4"},
        BadValue{"model.quantize=int4", "model.quantize: invalid value 'int4' (expected one of: none, nf4, fp8)"},
        BadValue{"eval.exact_match_samples=4",
                 "eval.exact_match_samples: exact match scores eval samples, but "
                 "data.eval is empty"},
        BadValue{"train.objective=dpo",
                 "train.objective: dpo trains on preference pairs, but data.train[0] is "
                 "'text' (set its format: preference"},
        BadValue{"data.train=[{path: train.jsonl, format: preference}]",
                 "data.train[0].format: preference pairs need a preference objective"},
        BadValue{"preference.label_smoothing=0.5",
                 "preference.label_smoothing: out of range (expected in [0, 0.5), got 0.5)",
                 {"train.objective=dpo", "data.train=[{path: train.jsonl, format: preference}]"}},
        BadValue{"preference.label_smoothing=0.1",
                 "preference.label_smoothing: ipo has no label smoothing",
                 {"train.objective=ipo", "data.train=[{path: train.jsonl, format: preference}]"}},
        BadValue{"preference.robust=true",
                 "preference.robust: robust applies to train.objective dpo",
                 {"train.objective=orpo", "data.train=[{path: train.jsonl, format: preference}]"}},
        BadValue{"preference.precompute_ref_logps=true",
                 "preference.precompute_ref_logps: simpo has no reference model (it applies to dpo and "
                 "ipo)",
                 {"train.objective=simpo", "data.train=[{path: train.jsonl, format: preference}]"}},
        BadValue{"optimizer.kahan_summation=true",
                 "optimizer.kahan_summation: Kahan summation compensates the rounding of bf16 "
                 "parameters, and this run trains none"},
        BadValue{"preference.beta=0",
                 "preference.beta: out of range (expected > 0, got 0)",
                 {"train.objective=simpo", "data.train=[{path: train.jsonl, format: preference}]"}},
        BadValue{"train.objective=kto",
                 "train.objective: invalid value 'kto' (expected one of: sft, dpo, ipo, simpo, orpo)"},
        BadValue{"checkpoint.keep_best=true",
                 "checkpoint.keep_best: the best checkpoint is chosen by eval loss, "
                 "but data.eval is empty"},
        BadValue{
            "checkpoint.keep_best=true",
            "checkpoint.keep_best: checkpoints are ranked by the eval loss of their own step: make "
            "checkpoint.every_steps a multiple of eval.every_steps (> 0)",
            {"data.eval=[{path: train.jsonl, format: text}]", "eval.every_steps=30", "checkpoint.every_steps=20"}}));

class ConfigConflicts : public ConfigDir {};

TEST_F(ConfigConflicts, WarmupWithinMaxStepsOrEpochModeIsFine) {
  EXPECT_NO_THROW(load(kMinimalConfig, {"train.max_steps=10", "scheduler.warmup_steps=10"}));
  EXPECT_NO_THROW(load(kMinimalConfig, {"scheduler.warmup_steps=20"}));            // epochs: length unknown until data
  EXPECT_NO_THROW(load(kMinimalConfig, {"train.max_steps=5", "train.epochs=0"}));  // epochs unused with max_steps
}

TEST_F(ConfigConflicts, NoTokenizerAtAll) {
  const auto msg = error_of("data:\n  train: [{path: train.jsonl}]\n");
  EXPECT_THAT(msg,
              HasSubstr((dir_ / "config.yaml").string() + ": tokenizer.path: no tokenizer: tokenizer.path and "
                                                          "model.path are empty and tokenizer.train_vocab_size is 0"));
}

TEST_F(ConfigConflicts, ModelDirMustExistAndHoldConfigJson) {
  EXPECT_THAT(error_of(std::string(kMinimalConfig) + "model:\n  path: nowhere\n"),
              HasSubstr(":8:9: model.path: directory '" + (dir_ / "nowhere").string() + "' does not exist"));
  put("empty_model/weights.bin", "");
  EXPECT_THAT(error_of(std::string(kMinimalConfig) + "model:\n  path: empty_model\n"),
              HasSubstr(":8:9: model.path: '" + (dir_ / "empty_model").string() + "' has no config.json"));
  put("good_model/config.json", "{}");
  EXPECT_NO_THROW(load(std::string(kMinimalConfig) + "model:\n  path: good_model\nlora: {enabled: true}\n"));
}

TEST_F(ConfigConflicts, TokenizerFileMustExistUnlessTrainedAtStart) {
  const std::string cfg = "data:\n  train: [{path: train.jsonl}]\ntokenizer:\n  path: tok.model\n";
  EXPECT_THAT(error_of(cfg),
              HasSubstr(":4:9: tokenizer.path: '" + (dir_ / "tok.model").string() + "' does not exist"));
  EXPECT_NO_THROW(load(cfg, {"tokenizer.train_vocab_size=100"}));
  put("tok.model", "x");
  EXPECT_NO_THROW(load(cfg));
}

TEST_F(ConfigConflicts, DataFilesMustExistUnlessSynthesized) {
  const std::string cfg =
      "tokenizer: {train_vocab_size: 64}\ndata:\n  train: [{path: gen/train.jsonl}]\n  eval: [{path: "
      "gen/eval.jsonl}]\n";
  const auto msg = error_of(cfg);
  EXPECT_THAT(msg, HasSubstr(":3:18: data.train[0].path: file '" + (dir_ / "gen/train.jsonl").string() +
                             "' does not exist (or set data.synth.task to generate it)"));
  EXPECT_THAT(msg,
              HasSubstr(":4:17: data.eval[0].path: file '" + (dir_ / "gen/eval.jsonl").string() + "' does not exist"));
  EXPECT_NO_THROW(load(cfg, {"data.synth.task=add"}));
}

TEST_F(ConfigConflicts, ResumeMustBeAutoNeverOrAnExistingPath) {
  EXPECT_THAT(error_of(kMinimalConfig, {"checkpoint.resume=/no/such/ckpt"}),
              HasSubstr("<override 'checkpoint.resume=/no/such/ckpt'>: checkpoint.resume: '/no/such/ckpt' does not "
                        "exist (expected auto, never or a checkpoint path)"));
  put("ckpt/step-1/state.json", "{}");
  EXPECT_NO_THROW(load(kMinimalConfig, {"checkpoint.resume=" + (dir_ / "ckpt/step-1").string()}));
  EXPECT_NO_THROW(load(kMinimalConfig, {"checkpoint.resume=never"}));
}

TEST_F(ConfigConflicts, DeviceAcceptsEveryDocumentedForm) {
  for (const char* d : {"auto", "cpu", "cuda", "cuda:0", "cuda:7"}) {
    EXPECT_EQ(load(kMinimalConfig, {std::string("run.device=") + d}).config.run.device.str(), d);
  }
}

TEST_F(ConfigConflicts, DeviceAndResumeAreParsedIntoTheirPartsWhenLoaded) {
  const DeviceSetting gpu = load(kMinimalConfig, {"run.device=cuda:3"}).config.run.device;
  EXPECT_EQ(gpu.kind, DeviceSetting::Kind::kCuda);
  EXPECT_EQ(gpu.index, 3);
  const DeviceSetting own = load(kMinimalConfig, {"run.device=cuda"}).config.run.device;
  EXPECT_EQ(own.kind, DeviceSetting::Kind::kCuda);
  EXPECT_EQ(own.index, -1);  // the local rank's GPU
  EXPECT_EQ(load(kMinimalConfig, {}).config.checkpoint.resume.mode, ResumeSetting::Mode::kAuto);
  EXPECT_EQ(load(kMinimalConfig, {"checkpoint.resume=never"}).config.checkpoint.resume.mode,
            ResumeSetting::Mode::kNever);
  put("ckpt/step-2/state.json", "{}");
  const std::string path = (dir_ / "ckpt/step-2").string();
  const ResumeSetting from = load(kMinimalConfig, {"checkpoint.resume=" + path}).config.checkpoint.resume;
  EXPECT_EQ(from.mode, ResumeSetting::Mode::kPath);
  EXPECT_EQ(from.path, path);
  EXPECT_THAT(error_of(kMinimalConfig, {"run.device=[0, 1]"}), HasSubstr("run.device: wrong type"));
}

}  // namespace
}  // namespace ft::test

// Validation of a bound Config: enums, ranges, conflicting options and files that must exist. Every rule
// reports through Errors so the user sees all problems of a config at once.
#include <algorithm>
#include <set>

#include "config/detail.h"
#include "config/loader.h"

namespace fs = std::filesystem;

namespace ft::config::detail {

namespace {

class Checker {
 public:
  Checker(const std::map<std::string, Origin>& locations, const Origin& fallback, Errors& errors)
      : locations_(locations), fallback_(fallback), errors_(errors) {}

  // Reports at the value's location, else at the nearest enclosing key the user wrote, else the config file.
  void fail(const std::string& key, const std::string& message) {
    std::string probe = key;
    while (!probe.empty()) {
      const auto it = locations_.find(probe);
      if (it != locations_.end()) return errors_.add(it->second, key, message);
      const size_t cut = probe.find_last_of(".[");
      probe = cut == std::string::npos ? std::string() : probe.substr(0, cut);
    }
    errors_.add(fallback_, key, message);
  }

  void one_of(const std::string& key, const std::string& value, std::initializer_list<const char*> allowed) {
    std::vector<std::string> choices;
    for (const char* a : allowed) {
      if (value == a) return;
      choices.emplace_back(a);
    }
    fail(key, invalid_choice(value, choices));
  }

  template <class T>
  void at_least(const std::string& key, T value, T min) {
    if (value < min) fail(key, "out of range (expected >= " + text(min) + ", got " + text(value) + ")");
  }

  void positive(const std::string& key, double value) {
    if (!(value > 0)) fail(key, "out of range (expected > 0, got " + text(value) + ")");
  }

  // [lo, hi] or [lo, hi) with `open_hi`.
  void within(const std::string& key, double value, double lo, double hi, bool open_hi) {
    const bool ok = value >= lo && (open_hi ? value < hi : value <= hi);
    if (!ok) {
      fail(key, "out of range (expected in [" + text(lo) + ", " + text(hi) + (open_hi ? ")" : "]") + ", got " +
                    text(value) + ")");
    }
  }

  void file_exists(const std::string& key, const std::string& path, const std::string& why) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) fail(key, "file '" + path + "' does not exist" + why);
  }

 private:
  static std::string text(int64_t v) { return std::to_string(v); }
  static std::string text(double v) { return format_double(v); }

  const std::map<std::string, Origin>& locations_;
  const Origin& fallback_;
  Errors& errors_;
};

void check_model(const Config& c, Checker& k) {
  const auto& m = c.model;
  k.at_least<int64_t>("model.vocab_size", m.vocab_size, 0);
  k.at_least<int64_t>("model.hidden_size", m.hidden_size, 1);
  k.at_least<int64_t>("model.intermediate_size", m.intermediate_size, 1);
  k.at_least<int64_t>("model.num_layers", m.num_layers, 1);
  k.at_least<int64_t>("model.num_heads", m.num_heads, 1);
  k.at_least<int64_t>("model.num_kv_heads", m.num_kv_heads, 1);
  k.at_least<int64_t>("model.max_position_embeddings", m.max_position_embeddings, 2);
  k.positive("model.rope_theta", m.rope_theta);
  k.positive("model.rms_norm_eps", m.rms_norm_eps);
  k.positive("model.init_std", m.init_std);
  k.at_least<int64_t>("model.num_experts", m.num_experts, 1);
  k.at_least<int64_t>("model.num_experts_per_tok", m.num_experts_per_tok, 1);
  k.at_least<int64_t>("model.moe_intermediate_size", m.moe_intermediate_size, 0);
  if (m.activation_offload && !m.activation_checkpointing) {
    k.fail("model.activation_offload",
           "offloads the layer inputs that activation checkpointing keeps; set model.activation_checkpointing: true");
  }
  if (m.num_experts_per_tok > m.num_experts) {
    k.fail("model.num_experts_per_tok", "must not exceed model.num_experts (" + std::to_string(m.num_experts) + ")");
  }
  if (m.path.empty()) {
    if (m.num_heads >= 1 && m.hidden_size % m.num_heads != 0) {
      k.fail("model.hidden_size", "must be a multiple of model.num_heads (" + std::to_string(m.num_heads) + ")");
    }
    if (m.num_heads >= 1 && m.num_kv_heads >= 1 && m.num_heads % m.num_kv_heads != 0) {
      k.fail("model.num_kv_heads", "must divide model.num_heads (" + std::to_string(m.num_heads) + ")");
    }
  } else {
    std::error_code ec;
    if (!fs::is_directory(m.path, ec)) {
      k.fail("model.path", "directory '" + m.path + "' does not exist (expected a Hugging Face model directory)");
    } else if (!fs::is_regular_file(fs::path(m.path) / "config.json", ec)) {
      k.fail("model.path", "'" + m.path + "' has no config.json (expected a Hugging Face model directory)");
    }
  }
}

void check_lora(const Config& c, Checker& k) {
  const auto& l = c.lora;
  k.at_least<int64_t>("lora.rank", l.rank, 1);
  k.positive("lora.alpha", l.alpha);
  k.within("lora.dropout", l.dropout, 0.0, 1.0, true);
  // Every family's projection names (and an MoE model's router, gate); whether the model has them is checked once it
  // is built (model::apply_lora).
  static const std::set<std::string> allowed = {"q_proj",    "k_proj",  "v_proj",       "qkv_proj",  "o_proj",
                                                "gate_proj", "up_proj", "gate_up_proj", "down_proj", "gate"};
  std::set<std::string> seen;
  for (const auto& t : l.targets) {
    // A name, or a dotted module path ending in one (model.layers.3.self_attn.q_proj), matched as PEFT does.
    const std::string leaf = t.substr(t.rfind('.') + 1);
    if (t == "all-linear" && l.targets.size() > 1) {
      k.fail("lora.targets", "all-linear adapts every projection; list nothing else with it");
    } else if (t != "all-linear" && allowed.count(leaf) == 0) {
      k.fail("lora.targets",
             "invalid target '" + t +
                 "' (expected all-linear, or a subset of: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                 "down_proj; phi3: qkv_proj, o_proj, gate_up_proj, down_proj; qwen3_moe and mixtral: q_proj, "
                 "k_proj, v_proj, o_proj, gate_up_proj, down_proj, gate; or a module path ending in one, such as "
                 "model.layers.3.mlp.down_proj)");
    } else if (!seen.insert(t).second) {
      k.fail("lora.targets", "'" + t + "' is listed twice");
    }
  }
  if (l.enabled && l.targets.empty()) k.fail("lora.targets", "empty, but lora.enabled is true (expected at least one)");
  if (l.enabled && c.model.path.empty()) {
    k.fail("lora.enabled", "LoRA needs a pretrained model, but model.path is empty (set model.path or disable lora)");
  }
  if (c.model.random_weights && c.model.path.empty()) {
    k.fail("model.random_weights",
           "needs model.path, whose config.json gives the shape (a model from the model.* dimensions is random "
           "already: leave this false)");
  }
  if (c.model.quantize != BaseQuantization::kNone && !l.enabled) {
    k.fail("model.quantize",
           "a quantized base is frozen and trains only through adapters; set lora.enabled: true "
           "(or model.quantize: none for a full fine-tune)");
  }
  if (c.model.nf4_compute == Nf4Compute::kFp8 && c.model.quantize != BaseQuantization::kNf4) {
    k.fail("model.nf4_compute",
           "fp8 sets the GEMMs of an NF4 base, and model.quantize is not nf4; set model.quantize: nf4, or "
           "model.nf4_compute: dtype (model.quantize: fp8 is an FP8 base already)");
  }
}

void check_tokenizer(const Config& c, Checker& k) {
  const auto& t = c.tokenizer;
  k.at_least<int64_t>("tokenizer.train_vocab_size", t.train_vocab_size, 0);
  for (size_t i = 0; i < t.add_tokens.size(); ++i) {
    const std::string at = "tokenizer.add_tokens[" + std::to_string(i) + "]";
    if (t.add_tokens[i].empty()) k.fail(at, "empty (expected the token's text, e.g. <|im_start|>)");
    for (size_t j = 0; j < i; ++j) {
      if (t.add_tokens[j] == t.add_tokens[i]) k.fail(at, "'" + t.add_tokens[i] + "' is listed twice");
    }
  }
  if (t.train_vocab_size > 0) return;  // trained at start, into tokenizer.path when set (train/build.h)
  if (!t.path.empty()) {
    std::error_code ec;
    if (!fs::exists(t.path, ec)) {
      k.fail("tokenizer.path",
             "'" + t.path + "' does not exist (expected a tokenizer file or a directory holding one)");
    }
  } else if (c.model.path.empty()) {
    k.fail("tokenizer.path",
           "no tokenizer: tokenizer.path and model.path are empty and tokenizer.train_vocab_size "
           "is 0 (set one of them)");
  }
}

void check_sources(const std::string& key, const std::vector<DataSource>& sources, bool synth, Checker& k) {
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& s = sources[i];
    const std::string at = key + "[" + std::to_string(i) + "]";
    k.positive(at + ".weight", s.weight);
    if (s.path.empty()) {
      // With a synthetic task the first source may leave its path empty: the trainer generates it into the run
      // directory (<output_dir>/data/<task>-train.jsonl or -eval.jsonl).
      if (!(synth && i == 0)) k.fail(at + ".path", "empty (expected a data file)");
    } else if (!synth) {
      k.file_exists(at + ".path", s.path, " (or set data.synth.task to generate it)");
    }
  }
}

void check_data(const Config& c, Checker& k) {
  const auto& d = c.data;
  const bool synth = !d.synth.task.empty();
  if (d.train.empty()) k.fail("data.train", "empty (expected at least one training source)");
  check_sources("data.train", d.train, synth, k);
  check_sources("data.eval", d.eval, synth, k);
  for (size_t i = 0; i < d.roles.size(); ++i) {
    const std::string& entry = d.roles[i];
    const size_t eq = entry.find('=');
    const std::string role = eq == std::string::npos ? "" : entry.substr(eq + 1);
    if (eq == std::string::npos || eq == 0 ||
        (role != "system" && role != "user" && role != "assistant" && role != "tool")) {
      k.fail("data.roles[" + std::to_string(i) + "]",
             "'" + entry + "' is not name=role with role system, user, assistant or tool (e.g. bot=assistant)");
    }
  }
  k.at_least<int64_t>("data.seq_len", d.seq_len, 2);
  k.at_least<int64_t>("data.prefetch", d.prefetch, 0);
  k.at_least<int64_t>("data.pad_to_multiple_of", d.pad_to_multiple_of, 0);
  k.at_least<int64_t>("data.synth.train_samples", d.synth.train_samples, 0);
  k.at_least<int64_t>("data.synth.eval_samples", d.synth.eval_samples, 0);
  DataFields fields = d.fields;
  auto check_field = [&](const char* name, const std::string& value) {
    if (value.empty()) k.fail(std::string("data.fields.") + name, "empty (expected a JSON field name)");
  };
  fields.visit(check_field);
}

void check_training(const Config& c, Checker& k) {
  const auto& t = c.train;
  k.at_least<int64_t>("train.max_steps", t.max_steps, 0);
  if (t.max_steps == 0) k.at_least<int64_t>("train.epochs", t.epochs, 1);
  k.at_least<int64_t>("train.micro_batch_size", t.micro_batch_size, 1);
  k.at_least<int64_t>("train.grad_accum_steps", t.grad_accum_steps, 1);
  k.at_least("train.grad_clip", t.grad_clip, 0.0);
  k.at_least<int64_t>("train.max_nan_skips", t.max_nan_skips, 0);
  k.positive("train.loss_scale_init", t.loss_scale_init);
  k.at_least<int64_t>("train.loss_scale_interval", t.loss_scale_interval, 1);
  k.at_least<int64_t>("train.profile_start_step", t.profile_start_step, 0);
  k.at_least<int64_t>("train.profile_steps", t.profile_steps, 1);

  const auto& o = c.optimizer;
  k.positive("optimizer.lr", o.lr);
  if (o.betas.size() != 2) {
    k.fail("optimizer.betas", "expected exactly 2 values (beta1, beta2), got " + std::to_string(o.betas.size()));
  } else {
    k.within("optimizer.betas[0]", o.betas[0], 0.0, 1.0, true);
    k.within("optimizer.betas[1]", o.betas[1], 0.0, 1.0, true);
  }
  k.positive("optimizer.eps", o.eps);
  k.at_least("optimizer.weight_decay", o.weight_decay, 0.0);
  const bool bf16_weights_train =
      !c.lora.enabled &&
      (t.precision == Precision::kBf16Pure || (c.model.dtype == ModelDType::kBf16 && t.precision != Precision::kFp16));
  if (o.kahan_summation && !bf16_weights_train) {
    k.fail("optimizer.kahan_summation",
           "Kahan summation compensates the rounding of bf16 parameters, and this run trains none; use it with "
           "train.precision: bf16-pure, or model.dtype: bf16 in a full fine-tune");
  }

  if (t.fp8 != Fp8Training::kOff) {
    if (c.lora.enabled) {
      k.fail("train.fp8",
             "FP8 training runs the GEMMs of trained weights; under LoRA they are frozen: use "
             "model.quantize: fp8 for an FP8 base, or lora.enabled: false for a full fine-tune");
    } else if (c.model.quantize != BaseQuantization::kNone) {
      k.fail("train.fp8", "a quantized base is frozen; FP8 training needs a full fine-tune of dense weights");
    } else if (t.precision != Precision::kBf16 && t.precision != Precision::kBf16Pure) {
      k.fail("train.fp8", "FP8 GEMMs compute in bf16 around them; set train.precision: bf16 or bf16-pure");
    }
  }
  k.at_least<int64_t>("train.fp8_edge_layers", t.fp8_edge_layers, 0);
  k.at_least<int64_t>("train.fp8_min_features", t.fp8_min_features, 0);
  for (size_t i = 0; i < t.fp8_skip.size(); ++i) {
    if (t.fp8_skip[i].empty()) k.fail("train.fp8_skip[" + std::to_string(i) + "]", "empty (expected a name part)");
  }

  const auto& s = c.scheduler;
  k.at_least<int64_t>("scheduler.warmup_steps", s.warmup_steps, 0);
  k.within("scheduler.warmup_ratio", s.warmup_ratio, 0.0, 1.0, false);
  k.within("scheduler.min_lr_ratio", s.min_lr_ratio, 0.0, 1.0, false);
  k.within("scheduler.decay_ratio", s.decay_ratio, 0.0, 1.0, false);
  if (t.max_steps > 0 && s.warmup_steps > t.max_steps) {
    k.fail("scheduler.warmup_steps", "warmup (" + std::to_string(s.warmup_steps) +
                                         " steps) is longer than "
                                         "train.max_steps (" +
                                         std::to_string(t.max_steps) + ")");
  }
}

// The preference objectives read pairs, and only they do; their settings are in range for the loss they set.
void check_preference(const Config& c, Checker& k) {
  const bool pairs_objective = c.train.objective != TrainObjective::kSft;
  const std::string objective = name_of(c.train.objective);
  auto check_formats = [&](const std::string& key, const std::vector<DataSource>& sources) {
    for (size_t i = 0; i < sources.size(); ++i) {
      const bool pairs = sources[i].format == SourceFormat::kPreference;
      if (pairs_objective && !pairs) {
        k.fail("train.objective", objective + " trains on preference pairs, but " + key + "[" + std::to_string(i) +
                                      "] is '" + name_of(sources[i].format) +
                                      "' (set its format: preference, with prompt/chosen/rejected records)");
      } else if (!pairs_objective && pairs) {
        k.fail(key + "[" + std::to_string(i) + "].format",
               "preference pairs need a preference objective (set train.objective to dpo, ipo, simpo or orpo)");
      }
    }
  };
  check_formats("data.train", c.data.train);
  check_formats("data.eval", c.data.eval);
  if (!pairs_objective) return;
  const auto& p = c.preference;
  k.positive("preference.beta", p.beta);
  k.within("preference.label_smoothing", p.label_smoothing, 0.0, 0.5, true);
  k.at_least("preference.orpo_lambda", p.orpo_lambda, 0.0);
  const auto kind = c.train.objective;
  if (p.label_smoothing > 0 && (kind == TrainObjective::kIpo || kind == TrainObjective::kOrpo)) {
    k.fail("preference.label_smoothing", objective + " has no label smoothing (it applies to dpo and simpo)");
  }
  if (p.robust && kind != TrainObjective::kDpo) k.fail("preference.robust", "robust applies to train.objective dpo");
  if (p.precompute_ref_logps && (kind == TrainObjective::kSimpo || kind == TrainObjective::kOrpo)) {
    k.fail("preference.precompute_ref_logps", objective + " has no reference model (it applies to dpo and ipo)");
  }
  if (c.data.synth.task.size() > 0) k.fail("data.synth.task", "synthetic tasks are SFT data, not preference pairs");
  if (c.data.overlong == Overlong::kDrop) {
    k.fail("data.overlong",
           "preference pairs are cut as TRL cuts them (see preference.truncation); drop applies "
           "to SFT samples only");
  }
  if (c.eval.exact_match_samples > 0) {
    k.fail("eval.exact_match_samples",
           "exact match scores prompt_completion samples; a preference eval set reports "
           "its loss and rewards instead");
  }
}

void check_rest(const Config& c, Checker& k) {
  const auto& e = c.eval;
  k.at_least<int64_t>("eval.every_steps", e.every_steps, 0);
  k.at_least<int64_t>("eval.max_batches", e.max_batches, 0);
  k.at_least<int64_t>("eval.exact_match_samples", e.exact_match_samples, 0);
  k.at_least<int64_t>("eval.max_new_tokens", e.max_new_tokens, 1);
  for (size_t i = 0; i < e.prompts.size(); ++i) {
    const auto& turns = e.prompts[i].messages;
    const std::string at = "eval.prompts[" + std::to_string(i) + "]";
    for (size_t j = 0; j < turns.size(); ++j) {
      k.one_of(at + "[" + std::to_string(j) + "].role", turns[j].role, {"system", "user", "assistant"});
    }
    if (!turns.empty() && turns.back().role != "user") {
      k.fail(at, "a prompt given as turns must end with a user turn (the model answers it), but it ends with '" +
                     turns.back().role + "'");
    }
  }
  if (e.exact_match_samples > 0 && c.data.eval.empty()) {
    k.fail("eval.exact_match_samples", "exact match scores eval samples, but data.eval is empty");
  }

  const auto& ck = c.checkpoint;
  if (c.run.overwrite && ck.resume.mode == ResumeSetting::Mode::kPath) {
    k.fail("run.overwrite",
           "deletes the earlier run to start again at step 0, but checkpoint.resume names a checkpoint to continue "
           "from: drop one of the two");
  }
  k.at_least<int64_t>("checkpoint.every_steps", ck.every_steps, 0);
  k.at_least<int64_t>("checkpoint.keep_last", ck.keep_last, 0);
  k.at_least<int64_t>("checkpoint.shard_size_mb", ck.shard_size_mb, 1);
  if (ck.keep_best && c.data.eval.empty()) {
    k.fail("checkpoint.keep_best", "the best checkpoint is chosen by eval loss, but data.eval is empty");
  } else if (ck.keep_best && ck.every_steps > 0 &&
             (c.eval.every_steps <= 0 || ck.every_steps % c.eval.every_steps != 0)) {
    k.fail("checkpoint.keep_best",
           "checkpoints are ranked by the eval loss of their own step: make "
           "checkpoint.every_steps a multiple of eval.every_steps (> 0)");
  }
  std::error_code ec;
  if (ck.resume.mode == ResumeSetting::Mode::kPath && !fs::exists(ck.resume.path, ec)) {
    k.fail("checkpoint.resume",
           "'" + ck.resume.path + "' does not exist (expected " + std::string(ResumeSetting::kExpected) + ")");
  }

  const auto& l = c.logging;
  k.at_least<int64_t>("logging.every_steps", l.every_steps, 1);
  k.at_least("logging.peak_tflops", l.peak_tflops, 0.0);

  const auto& d = c.distributed;
  k.at_least<int64_t>("distributed.timeout_s", d.timeout_s, 1);
  k.positive("distributed.bucket_cap_mb", d.bucket_cap_mb);
  if (d.zero != 0 && d.zero != 1) {
    k.fail("distributed.zero", "invalid value " + std::to_string(d.zero) + " (expected one of: 0, 1)");
  }
}

}  // namespace

std::string invalid_choice(const std::string& value, const std::vector<std::string>& choices) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  const std::string near = suggest_key(value, choices);
  return "invalid value '" + value + "' (expected one of: " + list + ")" +
         (near.empty() ? "" : "; did you mean '" + near + "'?");
}

void validate(const Config& config, const std::map<std::string, Origin>& locations, const Origin& fallback,
              Errors& errors) {
  Checker k(locations, fallback, errors);
  if (config.run.name.empty()) k.fail("run.name", "empty (expected a name)");
  if (config.run.output_dir.empty()) k.fail("run.output_dir", "empty (expected a directory)");
  check_model(config, k);
  check_lora(config, k);
  check_tokenizer(config, k);
  check_data(config, k);
  check_training(config, k);
  check_preference(config, k);
  check_rest(config, k);
}

}  // namespace ft::config::detail

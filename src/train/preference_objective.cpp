#include "train/preference_objective.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "data/batch.h"
#include "data/batch_source.h"
#include "data/dataset.h"
#include "data/preference_dataset.h"
#include "dist/comm.h"
#include "metrics/record.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "train/build.h"
#include "train/reference_logps_file.h"
#include "util/error.h"
#include "util/fmt.h"

namespace ft::train {
namespace {

// F32 [S]: values F32 [n] summed by the sequence each belongs to (sequence I64 [n], in [0, S)).
at::Tensor sum_per_sequence(const at::Tensor& values, const at::Tensor& sequence, int64_t sequences) {
  return at::zeros({sequences}, values.options()).index_add(0, sequence, values);
}

// I64 [B, T]: the next token of the same sequence at every position that has one (not only completion tokens),
// else -100: ORPO's NLL term scores every token of the chosen sequence but the first, prompt included (TRL).
at::Tensor next_token_labels(const at::Tensor& input_ids, const at::Tensor& sequence_ids) {
  const int64_t T = input_ids.size(1);
  const at::Tensor same = sequence_ids.narrow(1, 1, T - 1)
                              .eq(sequence_ids.narrow(1, 0, T - 1))
                              .logical_and(sequence_ids.narrow(1, 0, T - 1).ge(0));  // Bool [B, T-1]
  at::Tensor labels = at::full_like(input_ids, data::kIgnoreIndex);
  labels.narrow(1, 0, T - 1).copy_(at::where(same, input_ids.narrow(1, 1, T - 1), data::kIgnoreIndex));
  return labels;
}

bool is_reference_free(PreferenceLossKind kind) {
  return kind == PreferenceLossKind::kSimpo || kind == PreferenceLossKind::kOrpo;
}

void add_metric(metrics::MetricSums& sums, const char* name, const at::Tensor& per_pair) {
  sums.emplace_back(name, per_pair.detach().to(at::kFloat).sum());
}

}  // namespace

// The positions a forward scores, on the device: the rows of the flattened [B * T] batch that have a label, the
// label, and the sequence each belongs to. Only these rows go through the LM head (about half the positions of a
// pair are prompt tokens). Their count is known on the host, so nonzero_static finds them without a sync.
struct PreferenceObjective::ScoredRows {
  at::Tensor rows;      // I64 [n]
  at::Tensor labels;    // I64 [n]
  at::Tensor sequence;  // I64 [n]
  static ScoredRows of(const at::Tensor& labels, const at::Tensor& sequence_ids, int64_t count) {
    const at::Tensor flat = labels.reshape({-1});
    ScoredRows r;
    r.rows = at::nonzero_static(flat.ne(data::kIgnoreIndex), count).squeeze(1);
    r.labels = flat.index_select(0, r.rows);
    r.sequence = sequence_ids.reshape({-1}).index_select(0, r.rows);
    return r;
  }
};

PreferenceObjective::PreferenceObjective(PreferenceLossOptions loss, PrecisionPolicy precision,
                                         model::KernelPolicy kernels, std::shared_ptr<model::Transformer> reference,
                                         std::optional<PrecomputedReference> precomputed)
    : loss_(loss),
      precision_(precision),
      kernels_(std::move(kernels)),
      reference_(std::move(reference)),
      precomputed_(is_reference_free(loss.kind) ? std::nullopt : std::move(precomputed)) {}

int64_t PreferenceObjective::units(const data::Batch& batch) const {
  FT_CHECK(batch.pairs.has_value(), "a preference objective needs batches of preference pairs");
  return batch.pairs->num_pairs;
}

bool PreferenceObjective::needs_reference() const {
  return !is_reference_free(loss_.kind);
}

at::Tensor PreferenceObjective::completion_logps(model::Transformer& model, const DeviceBatch& inputs,
                                                 const ScoredRows& scored, int64_t sequences) const {
  const at::Tensor losses = token_losses(model, inputs, scored.rows, scored.labels, precision_, kernels_);  // F32 [n]
  return -sum_per_sequence(losses, scored.sequence, sequences);
}

at::Tensor PreferenceObjective::reference_logps(model::Transformer& model, const DeviceBatch& inputs,
                                                const ScoredRows& scored, int64_t sequences) const {
  at::NoGradGuard no_grad;
  if (reference_) return completion_logps(*reference_, inputs, scored, sequences);
  model::AdaptersDisabled base_only(model);
  return completion_logps(model, inputs, scored, sequences);
}

void PreferenceObjective::prepare_pairs(model::Transformer& model, data::PreferenceDataset& pairs,
                                        const data::CollateOptions& options, int64_t pairs_per_batch,
                                        const RunContext& ctx) const {
  if (!precomputed_) return;
  const auto start = std::chrono::steady_clock::now();
  const std::string key = reference_logps_key(pairs, precomputed_->context);
  const int64_t n = pairs.distinct_pairs();
  if (auto kept = read_reference_logps(precomputed_->dir, key, n, ctx.comm.get(), ctx.rank)) {
    pairs.set_reference_logps(*kept);
    FT_LOG_INFO("reference log-probs of {} pairs read from {}", n, (precomputed_->dir / key).string());
    return;
  }
  const at::Tensor table = score_pairs(model, pairs, options, pairs_per_batch, ctx);
  pairs.set_reference_logps(table);
  write_reference_logps(precomputed_->dir, key, table, ctx.rank);
  FT_LOG_INFO("reference log-probs of {} pairs precomputed in {:.1f} s", n,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

at::Tensor PreferenceObjective::score_pairs(model::Transformer& model, const data::PreferenceDataset& pairs,
                                            const data::CollateOptions& options, int64_t pairs_per_batch,
                                            const RunContext& ctx) const {
  const int64_t n = pairs.distinct_pairs();
  const c10::Device device = kernels_.device;
  at::Tensor table = at::zeros({n, 2}, at::TensorOptions().dtype(at::kFloat).device(device));  // F32 [N, 2]
  const bool was_training = model.is_training();
  model.eval();  // no dropout: the reference is the model as it starts
  {
    at::NoGradGuard no_grad;
    model::AdaptersDisabled base_only(model);
    const int64_t batches = (n + pairs_per_batch - 1) / pairs_per_batch;
    for (int64_t b = ctx.rank; b < batches; b += ctx.world_size) {
      std::vector<int64_t> ids;
      for (int64_t i = b * pairs_per_batch; i < std::min(n, (b + 1) * pairs_per_batch); ++i) ids.push_back(i);
      const data::Batch batch = pairs.collate_distinct(ids, options);
      const auto P = static_cast<int64_t>(ids.size());
      const DeviceBatch inputs = DeviceBatch::of(batch, device);
      const ScoredRows scored =
          ScoredRows::of(batch.labels.to(device), batch.pairs->sequence_ids.to(device), batch.num_target_tokens);
      const at::Tensor logps = completion_logps(model, inputs, scored, 2 * P);  // F32 [2P]
      table.narrow(0, ids.front(), P).copy_(logps.reshape({2, P}).t());
    }
  }
  model.train(was_training);
  if (ctx.world_size > 1) {
    std::vector<at::Tensor> parts{table};
    ctx.comm->all_reduce_(parts, dist::ReduceOp::kSum);  // every row comes from exactly one rank
  }
  return table.cpu();
}

at::Tensor PreferenceObjective::compute(model::Transformer& model, const data::Batch& batch,
                                        metrics::MetricSums* metrics) const {
  const int64_t P = units(batch);
  const int64_t S = 2 * P;  // the chosen sequences of pairs 0..P-1, then their rejected ones
  const c10::Device device = kernels_.device;
  const DeviceBatch inputs = DeviceBatch::of(batch, device);
  const at::Tensor labels = batch.labels.to(device, /*non_blocking=*/true);                     // I64 [B, T]
  const at::Tensor sequence_ids = batch.pairs->sequence_ids.to(device, /*non_blocking=*/true);  // I64 [B, T]
  const bool orpo = loss_.kind == PreferenceLossKind::kOrpo;
  // The completion rows: what DPO, IPO and SimPO score, and what a reference forward scores (ORPO scores more).
  std::optional<ScoredRows> completion;
  if (!orpo) completion = ScoredRows::of(labels, sequence_ids, batch.num_target_tokens);

  PreferenceInputs in;
  if (orpo) {
    // ORPO's NLL term scores every next token of the chosen sequences, prompt included (TRL): one forward over
    // those rows gives both the completion sums and the NLL. TRL's NLL is one token mean over the micro-batch's
    // chosen sequences, so pair i carries P * S_i / N of it.
    const int64_t next_tokens = batch.pairs->sequence_ids.ge(0).sum().item<int64_t>() - S;  // host tensor
    const ScoredRows all = ScoredRows::of(next_token_labels(inputs.input_ids, sequence_ids), sequence_ids, next_tokens);
    const at::Tensor losses = token_losses(model, inputs, all.rows, all.labels, precision_, kernels_);  // F32 [n]
    const at::Tensor in_completion = labels.reshape({-1}).index_select(0, all.rows).ne(data::kIgnoreIndex);
    const at::Tensor logps = -sum_per_sequence(losses * in_completion, all.sequence, S);  // F32 [2P]
    in.policy_chosen_logps = logps.narrow(0, 0, P);
    in.policy_rejected_logps = logps.narrow(0, P, P);
    const at::Tensor nll = sum_per_sequence(losses, all.sequence, S).narrow(0, 0, P);  // F32 [P]
    const at::Tensor tokens = sum_per_sequence(at::ones_like(losses), all.sequence, S).narrow(0, 0, P).sum();
    in.chosen_nll = nll * (static_cast<double>(P) / tokens.clamp_min(1.0));
  } else {
    const at::Tensor logps = completion_logps(model, inputs, *completion, S);  // F32 [2P]
    in.policy_chosen_logps = logps.narrow(0, 0, P);
    in.policy_rejected_logps = logps.narrow(0, P, P);
  }
  if (needs_reference()) {
    FT_CHECK(!precomputed_.has_value() || batch.pairs->reference_logps.defined(),
             "a batch of pairs without the precomputed reference log-probs (preference.precompute_ref_logps)");
    const at::Tensor ref = precomputed_.has_value() ? batch.pairs->reference_logps.to(device, /*non_blocking=*/true)
                                                    : reference_logps(model, inputs, *completion, S);  // F32 [2P]
    in.ref_chosen_logps = ref.narrow(0, 0, P);
    in.ref_rejected_logps = ref.narrow(0, P, P);
  }
  // IPO divides by DPOTrainer's completion-mask counts; SimPO and ORPO average over the summed labels.
  const at::Tensor counts =
      (loss_.kind == PreferenceLossKind::kIpo ? batch.pairs->completion_tokens : batch.pairs->target_tokens)
          .to(device, /*non_blocking=*/true);
  in.chosen_tokens = counts.narrow(0, 0, P);
  in.rejected_tokens = counts.narrow(0, P, P);
  const PreferenceLossOutput out = preference_loss(in, loss_);
  if (metrics) {
    add_metric(*metrics, "rewards/chosen", out.chosen_rewards);
    add_metric(*metrics, "rewards/rejected", out.rejected_rewards);
    add_metric(*metrics, metrics::kRewardAccuracies, out.chosen_rewards.gt(out.rejected_rewards));
    add_metric(*metrics, metrics::kRewardMargins, out.chosen_rewards - out.rejected_rewards);
    add_metric(*metrics, "logps/chosen", out.chosen_logps);
    add_metric(*metrics, "logps/rejected", out.rejected_logps);
    if (orpo) {
      add_metric(*metrics, "log_odds_ratio", out.log_odds_ratio);
      add_metric(*metrics, "log_odds_chosen", out.log_odds);
      add_metric(*metrics, "nll_loss", in.chosen_nll);
    }
  }
  return out.losses.sum();
}

PreferenceLossOptions preference_loss_options(const Config& cfg) {
  const auto& p = cfg.preference;
  PreferenceLossOptions o;
  switch (cfg.train.objective) {
    case TrainObjective::kDpo:
      o.kind = p.robust ? PreferenceLossKind::kDpoRobust : PreferenceLossKind::kDpoSigmoid;
      break;
    case TrainObjective::kIpo:
      o.kind = PreferenceLossKind::kIpo;
      break;
    case TrainObjective::kSimpo:
      o.kind = PreferenceLossKind::kSimpo;
      break;
    case TrainObjective::kOrpo:
      o.kind = PreferenceLossKind::kOrpo;
      break;
    case TrainObjective::kSft:
      throw ConfigError("train.objective sft has no preference loss");
  }
  o.beta = p.beta;
  o.label_smoothing = p.label_smoothing;
  o.simpo_gamma = p.simpo_gamma;
  o.orpo_lambda = p.orpo_lambda;
  return o;
}

std::unique_ptr<Objective> build_preference_objective(const Config& cfg, const PrecisionPolicy& precision,
                                                      const model::KernelPolicy& kernels,
                                                      const tok::Tokenizer& tokenizer, const RunContext& ctx) {
  const PreferenceLossOptions loss = preference_loss_options(cfg);
  std::shared_ptr<model::Transformer> reference;
  std::optional<PrecomputedReference> precomputed;
  if (cfg.preference.precompute_ref_logps && !is_reference_free(loss.kind)) {
    // Beside the tokenized data: runs of one model on the same pairs (a sweep's trials, a resumed run) share them.
    const std::filesystem::path cache = cfg.data.cache_dir.empty() ? data::default_cache_dir(cfg.run.output_dir)
                                                                   : std::filesystem::path(cfg.data.cache_dir);
    precomputed = PrecomputedReference{cache / "reference_logps", reference_logps_context(cfg, ctx.device)};
    FT_LOG_INFO("{}: the reference log-probs are computed once before training, with the starting model{}",
                name_of(cfg.train.objective), cfg.lora.enabled ? " (adapters off)" : "");
  } else if (!is_reference_free(loss.kind) && !cfg.lora.enabled) {
    // A full fine-tune moves every weight: the reference is a frozen copy of the starting model.
    reference = build_base_model(cfg, tokenizer, precision, ctx);
    seed_rank_generators(cfg, ctx);
    for (auto& p : reference->parameters()) p.set_requires_grad(false);
    reference->eval();
    reference->set_kernel_policy(kernels);
    FT_LOG_INFO("{}: the reference model is a frozen copy of the starting model", name_of(cfg.train.objective));
  } else if (!is_reference_free(loss.kind)) {
    FT_LOG_INFO("{}: the reference model is the base with the adapters switched off", name_of(cfg.train.objective));
  }
  return std::make_unique<PreferenceObjective>(loss, precision, kernels, std::move(reference), std::move(precomputed));
}

}  // namespace ft::train

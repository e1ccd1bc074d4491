// The preference objectives (train.objective dpo | ipo | simpo | orpo) on batches of pairs (data/preference.h).
//
// One forward over the 2P sequences of P pairs gives per-position cross-entropies (the chunked linear +
// cross-entropy on GPUs: no [tokens, vocab] logits), summed per sequence into the completion log-probabilities
// TRL scores. DPO and IPO add the same sums under the reference model, without gradients: the base with the
// adapters switched off under LoRA, else a frozen copy of the starting model. The losses and logged values are
// train/preference_loss.h's (TRL 1.16's formulas); the unit is a pair, so the loop averages over the pairs of the
// optimizer step on all ranks. Nothing reads a value on the host.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "train/objective.h"
#include "train/preference_loss.h"

namespace ft::train {

// Where precomputed reference log-probs are kept (train/reference_logps_file.h): the directory and the context of
// their key.
struct PrecomputedReference {
  std::filesystem::path dir;
  std::string context;
};

class PreferenceObjective final : public Objective {
 public:
  // `reference`: the frozen reference model (DPO and IPO of a full fine-tune); null under LoRA, where the policy
  // model with its adapters off is the reference, and for SimPO and ORPO, which have none.
  // `precomputed`: the reference's log-probs come with the batches (prepare_pairs), and no reference forward runs.
  PreferenceObjective(PreferenceLossOptions loss, PrecisionPolicy precision, model::KernelPolicy kernels,
                      std::shared_ptr<model::Transformer> reference,
                      std::optional<PrecomputedReference> precomputed = std::nullopt);
  int64_t units(const data::Batch& batch) const override;  // pairs
  bool needs_reference() const;
  // With `precomputed`: the reference log-probs of every distinct pair of `pairs`, attached to the set
  // (PreferenceDataset::set_reference_logps): read from the precomputed directory when it holds them under this key,
  // else computed with `model` as it is now (the starting model; under LoRA with its adapters off), in eval mode and
  // without gradients, the ranks splitting the batches and summing their parts, and kept there.
  void prepare_pairs(model::Transformer& model, data::PreferenceDataset& pairs, const data::CollateOptions& options,
                     int64_t pairs_per_batch, const RunContext& ctx) const override;

 protected:
  // Adds TRL's metrics as sums over the pairs: rewards/chosen, rewards/rejected, rewards/accuracies,
  // rewards/margins, logps/chosen, logps/rejected, and ORPO's log_odds_ratio, log_odds_chosen and nll_loss.
  at::Tensor compute(model::Transformer& model, const data::Batch& batch, metrics::MetricSums* metrics) const override;

 private:
  struct ScoredRows;  // the labelled positions of a batch (preference_objective.cpp)
  // F32 [2P]: each sequence's summed log-probability of its scored completion tokens under `model`.
  at::Tensor completion_logps(model::Transformer& model, const DeviceBatch& inputs, const ScoredRows& scored,
                              int64_t sequences) const;
  // The same under the reference, without gradients.
  at::Tensor reference_logps(model::Transformer& model, const DeviceBatch& inputs, const ScoredRows& scored,
                             int64_t sequences) const;

  PreferenceLossOptions loss_;
  PrecisionPolicy precision_;
  model::KernelPolicy kernels_;
  // F32 [pairs, 2] of prepare_pairs, computed.
  at::Tensor score_pairs(model::Transformer& model, const data::PreferenceDataset& pairs,
                         const data::CollateOptions& options, int64_t pairs_per_batch, const RunContext& ctx) const;

  std::shared_ptr<model::Transformer> reference_;
  std::optional<PrecomputedReference> precomputed_;
};

// The loss options of cfg.train.objective from cfg.preference (dpo with label_smoothing: cDPO, or robust DPO with
// preference.robust).
PreferenceLossOptions preference_loss_options(const Config& cfg);

// The PreferenceObjective of a run, with its reference model when it needs one.
std::unique_ptr<Objective> build_preference_objective(const Config& cfg, const PrecisionPolicy& precision,
                                                      const model::KernelPolicy& kernels,
                                                      const tok::Tokenizer& tokenizer, const RunContext& ctx);

}  // namespace ft::train

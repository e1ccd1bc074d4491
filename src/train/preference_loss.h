// The preference losses of the DPO family (DPO, robust DPO, IPO, SimPO, ORPO) from per-sequence quantities, with
// the formulas of the pinned TRL (trl==1.16.0): DPOTrainer._compute_loss (sigmoid, robust, ipo), CPOTrainer.cpo_loss
// with loss_type="simpo" and cpo_alpha=0 (SimPO), ORPOTrainer.odds_ratio_loss + get_batch_loss_metrics (ORPO).
//
// This file only does the math on one value per pair: summing per-token log-probabilities over a completion, the
// reference forward and the reduction over pairs and ranks are the caller's. Every input is a 1-D tensor of P
// pairs, F32 (or F64, for reference tests), all of one dtype and device. Nothing here reads values on the host, so
// it can run inside a training step without a device sync.
#pragma once

#include <ATen/ATen.h>

namespace ft::train {

enum class PreferenceLossKind {
  // DPO: -log σ(β·Δ), Δ = (πc - refc) - (πr - refr) over summed completion log-probs (TRL loss_type="sigmoid").
  // With label_smoothing ε > 0 it is conservative DPO (cDPO): -(1-ε)·log σ(β·Δ) - ε·log σ(-β·Δ). TRL 1.16's
  // DPOTrainer ignores label_smoothing for "sigmoid" (older TRL applied exactly this cDPO form, and TRL 1.16's
  // CPOTrainer "sigmoid" still does); at ε = 0 both are the same.
  kDpoSigmoid,
  // Robust DPO (TRL loss_type="robust"): (-(1-ε)·log σ(β·Δ) + ε·log σ(-β·Δ)) / (1 - 2ε), ε in [0, 0.5).
  kDpoRobust,
  // IPO (TRL loss_type="ipo"): (Δc/nc - Δr/nr - 1/(2β))², each log-ratio divided by its completion's token count
  // (clamped to >= 1), as TRL does; the rewards stay β·(π - ref) of the *summed* log-probs.
  kIpo,
  // SimPO (TRL CPOTrainer, loss_type="simpo", cpo_alpha=0): with average log-probs a = sum / tokens and
  // x = ac - ar - γ/β: -(1-ε)·log σ(β·x) - ε·log σ(-β·x). No reference model.
  kSimpo,
  // ORPO (TRL ORPOTrainer): with average log-probs a = sum / tokens,
  // log_odds = (ac - ar) - (log(1 - exp(ac)) - log(1 - exp(ar))), loss = nll_chosen - λ·log σ(log_odds).
  // No reference model.
  kOrpo,
};

struct PreferenceLossOptions {
  PreferenceLossKind kind = PreferenceLossKind::kDpoSigmoid;
  // β: TRL's `beta` of DPOConfig and CPOConfig (DPO, robust, IPO's τ, SimPO). ORPO does not use it.
  double beta = 0.1;
  // ε: cDPO (kDpoSigmoid), robust DPO and SimPO; must be 0 for IPO and ORPO, which have none.
  double label_smoothing = 0.0;
  // γ: SimPO's target reward margin (TRL CPOConfig.simpo_gamma).
  double simpo_gamma = 0.5;
  // λ: the weight of ORPO's odds-ratio term. TRL calls it ORPOConfig.beta (the paper's λ): it also scales ORPO's
  // logged rewards.
  double orpo_lambda = 0.1;
};

// Per-pair inputs, each [P]. Which are needed depends on the kind; the others may be left undefined.
struct PreferenceInputs {
  // F32 [P] the policy's log-probabilities of each completion's tokens, summed over the completion (the tokens TRL's
  // completion mask scores). Autograd flows through these.
  at::Tensor policy_chosen_logps;
  at::Tensor policy_rejected_logps;
  // F32 [P] the same sums under the reference model (DPO, robust, IPO), without autograd history.
  at::Tensor ref_chosen_logps;
  at::Tensor ref_rejected_logps;
  // [P] integer or float: the number of tokens in each sum above (IPO, SimPO, ORPO).
  at::Tensor chosen_tokens;
  at::Tensor rejected_tokens;
  // F32 [P] ORPO's SFT term, one value per pair; the pairs' mean is the NLL of the ORPO loss, and autograd flows
  // through it. TRL's nll_loss is one token-level mean over all chosen rows of the micro-batch, and it counts the
  // prompt tokens too (labels = every attended token of the chosen row but the first, not only the completion). To
  // equal it, pass chosen_nll[i] = P · S_i / N, where S_i is the summed -log p over those tokens of pair i and N
  // the count of those tokens over the P chosen rows. Passing S_i / n_i (each pair's own mean) equals TRL only when
  // all chosen rows have the same length.
  at::Tensor chosen_nll;
};

struct PreferenceLossOutput {
  at::Tensor losses;            // F32 [P] the per-pair loss to minimise (TRL's batch loss is its mean)
  at::Tensor chosen_rewards;    // F32 [P] detached: rewards/chosen before averaging
  at::Tensor rejected_rewards;  // F32 [P] detached: rewards/rejected before averaging
  at::Tensor chosen_logps;      // F32 [P] detached: logps/chosen as TRL logs it (sums; averages for SimPO/ORPO)
  at::Tensor rejected_logps;    // F32 [P] detached: logps/rejected
  at::Tensor log_odds;          // F32 [P] detached, ORPO only: TRL's log_odds_chosen before averaging
  at::Tensor log_odds_ratio;    // F32 [P] detached, ORPO only: log σ(log_odds), TRL's log_odds_ratio
};

// The per-pair losses and logged quantities of `options.kind`. Throws ft::Error for a missing input, mismatched
// shapes, dtypes or devices, and out-of-range options.
PreferenceLossOutput preference_loss(const PreferenceInputs& inputs, const PreferenceLossOptions& options);

}  // namespace ft::train

#include "train/preference_loss.h"

#include <string>

#include "util/error.h"

namespace ft::train {
namespace {

using Kind = PreferenceLossKind;

bool needs_reference(Kind kind) {
  return kind == Kind::kDpoSigmoid || kind == Kind::kDpoRobust || kind == Kind::kIpo;
}
bool needs_token_counts(Kind kind) {
  return kind == Kind::kIpo || kind == Kind::kSimpo || kind == Kind::kOrpo;
}

// `t` must be a defined 1-D tensor shaped like `like` (the policy's chosen log-probs), on its device; `same_dtype`
// for the log-prob inputs (the token counts may be integers).
void check_input(const at::Tensor& t, const char* name, const at::Tensor& like, bool same_dtype) {
  FT_CHECK(t.defined(), std::string("preference loss: input ") + name + " is missing for this loss kind");
  FT_CHECK(t.dim() == 1 && t.size(0) == like.size(0), std::string("preference loss: ") + name + " has shape " +
                                                          c10::str(t.sizes()) + ", expected [" +
                                                          std::to_string(like.size(0)) + "] (one value per pair)");
  FT_CHECK(t.device() == like.device(), std::string("preference loss: ") + name + " is on " + t.device().str() +
                                            ", the policy log-probs on " + like.device().str());
  if (same_dtype) {
    FT_CHECK(t.scalar_type() == like.scalar_type(), std::string("preference loss: ") + name + " is " +
                                                        c10::toString(t.scalar_type()) + ", the policy log-probs " +
                                                        c10::toString(like.scalar_type()));
  }
}

void check_inputs(const PreferenceInputs& in, Kind kind) {
  const at::Tensor& pc = in.policy_chosen_logps;
  FT_CHECK(pc.defined() && pc.dim() == 1, "preference loss: policy_chosen_logps must be a 1-D tensor [pairs]");
  FT_CHECK(pc.scalar_type() == at::kFloat || pc.scalar_type() == at::kDouble,
           std::string("preference loss: log-probs must be F32 (or F64), got ") + c10::toString(pc.scalar_type()));
  check_input(in.policy_rejected_logps, "policy_rejected_logps", pc, true);
  if (needs_reference(kind)) {
    check_input(in.ref_chosen_logps, "ref_chosen_logps", pc, true);
    check_input(in.ref_rejected_logps, "ref_rejected_logps", pc, true);
  }
  if (needs_token_counts(kind)) {
    check_input(in.chosen_tokens, "chosen_tokens", pc, false);
    check_input(in.rejected_tokens, "rejected_tokens", pc, false);
  }
  if (kind == Kind::kOrpo) check_input(in.chosen_nll, "chosen_nll", pc, true);
}

void check_options(const PreferenceLossOptions& o) {
  const double eps = o.label_smoothing;
  if (o.kind == Kind::kOrpo) {
    FT_CHECK(o.orpo_lambda >= 0.0, "preference loss: ORPO's lambda must be >= 0, got " + std::to_string(o.orpo_lambda));
  } else {
    FT_CHECK(o.beta > 0.0, "preference loss: beta must be > 0, got " + std::to_string(o.beta));
  }
  if (o.kind == Kind::kIpo || o.kind == Kind::kOrpo) {
    // TRL silently ignores label_smoothing here; refusing it is clearer than training something other than asked.
    FT_CHECK(eps == 0.0, "preference loss: IPO and ORPO have no label smoothing, got " + std::to_string(eps));
  } else {
    // 0.5 would divide robust DPO by zero and turn cDPO / SimPO into a loss that ignores the labels.
    FT_CHECK(eps >= 0.0 && eps < 0.5,
             "preference loss: label_smoothing must be in [0, 0.5), got " + std::to_string(eps));
  }
}

// -(1-ε)·log σ(β·x) - ε·log σ(-β·x), in the operation order of TRL's CPOTrainer.cpo_loss. F32 [P].
at::Tensor smoothed_sigmoid_loss(const at::Tensor& x, double beta, double eps) {
  return at::log_sigmoid(x * beta).neg() * (1.0 - eps) - at::log_sigmoid(x * -beta) * eps;
}

// log(1 - exp(x)) for x < 0 as TRL's orpo_trainer.log1mexp: log1p(-exp(x)) far from 0, log(-expm1(x)) near 0,
// where each form keeps its precision (the switch at -ln 2). F32 [P].
at::Tensor log1mexp(const at::Tensor& x) {
  constexpr double kMinusLn2 = -0.6931471805599453;
  return at::where(x < kMinusLn2, at::log1p(at::exp(x).neg()), at::log(at::expm1(x).neg()));
}

// DPO, cDPO, robust DPO and IPO: every one a function of the policy/reference log-ratios.
PreferenceLossOutput dpo_family(const PreferenceInputs& in, const PreferenceLossOptions& o) {
  const double beta = o.beta, eps = o.label_smoothing;
  const at::Tensor chosen_logratios = in.policy_chosen_logps - in.ref_chosen_logps;        // F32 [P]
  const at::Tensor rejected_logratios = in.policy_rejected_logps - in.ref_rejected_logps;  // F32 [P]
  const at::Tensor delta = chosen_logratios - rejected_logratios;                          // F32 [P]
  PreferenceLossOutput out;
  if (o.kind == Kind::kDpoSigmoid) {
    // At ε = 0 exactly TRL's "sigmoid" expression, without the ε·log σ(-βΔ) term.
    out.losses = eps == 0.0 ? at::log_sigmoid(delta * beta).neg() : smoothed_sigmoid_loss(delta, beta, eps);
  } else if (o.kind == Kind::kDpoRobust) {
    // The flipped-label term enters with a + sign: an unbiased estimate of the clean loss under label noise ε.
    const at::Tensor clean = at::log_sigmoid(delta * beta) * -(1.0 - eps);
    const at::Tensor flipped = at::log_sigmoid(delta * -beta) * -eps;
    out.losses = (clean - flipped) / (1.0 - 2.0 * eps);
  } else {
    // TRL divides IPO's log-ratios by the completion lengths (confirmed with the IPO authors, says its comment), so
    // that τ = β does not scale with length; a zero-length completion counts as 1.
    const at::Tensor chosen_avg = chosen_logratios / in.chosen_tokens.to(delta.scalar_type()).clamp_min(1.0);
    const at::Tensor rejected_avg = rejected_logratios / in.rejected_tokens.to(delta.scalar_type()).clamp_min(1.0);
    out.losses = (chosen_avg - rejected_avg - 1.0 / (2.0 * beta)).pow(2);
  }
  // The logged rewards are β times the summed log-ratios for every kind, IPO included (not the averaged ones).
  out.chosen_rewards = chosen_logratios.detach() * beta;
  out.rejected_rewards = rejected_logratios.detach() * beta;
  out.chosen_logps = in.policy_chosen_logps.detach();
  out.rejected_logps = in.policy_rejected_logps.detach();
  return out;
}

// SimPO: length-normalised policy log-probs against a margin γ, no reference model.
PreferenceLossOutput simpo(const PreferenceInputs& in, const PreferenceLossOptions& o) {
  // CPOTrainer.get_batch_logps(average_log_prob=True): sum / count, no clamp (a count of 0 gives NaN there too).
  const at::Tensor chosen_avg = in.policy_chosen_logps / in.chosen_tokens.to(in.policy_chosen_logps.scalar_type());
  const at::Tensor rejected_avg =
      in.policy_rejected_logps / in.rejected_tokens.to(in.policy_rejected_logps.scalar_type());
  // TRL subtracts γ/β from the logits and multiplies by β afterwards: β·(Δa - γ/β), which is β·Δa - γ up to
  // rounding; kept in TRL's order for equal bits.
  const at::Tensor x = (chosen_avg - rejected_avg) - o.simpo_gamma / o.beta;  // F32 [P]
  PreferenceLossOutput out;
  out.losses = smoothed_sigmoid_loss(x, o.beta, o.label_smoothing);
  out.chosen_rewards = chosen_avg.detach() * o.beta;
  out.rejected_rewards = rejected_avg.detach() * o.beta;
  out.chosen_logps = chosen_avg.detach();
  out.rejected_logps = rejected_avg.detach();
  return out;
}

// ORPO: the SFT NLL of the chosen answer minus λ times the log-sigmoid of the log odds ratio.
PreferenceLossOutput orpo(const PreferenceInputs& in, const PreferenceLossOptions& o) {
  const at::Tensor chosen_avg = in.policy_chosen_logps / in.chosen_tokens.to(in.policy_chosen_logps.scalar_type());
  const at::Tensor rejected_avg =
      in.policy_rejected_logps / in.rejected_tokens.to(in.policy_rejected_logps.scalar_type());
  // log odds(p) = log p - log(1 - p) with log p the *average* token log-prob, so p is a per-token geometric mean.
  const at::Tensor log_odds = (chosen_avg - rejected_avg) - (log1mexp(chosen_avg) - log1mexp(rejected_avg));
  const at::Tensor ratio = at::log_sigmoid(log_odds);  // F32 [P], <= 0
  PreferenceLossOutput out;
  // TRL's odds_ratio_loss returns +λ·log σ(log_odds) and get_batch_loss_metrics *subtracts* its mean from the NLL;
  // here the sign is folded in so that every kind's loss is the one to minimise.
  out.losses = in.chosen_nll - ratio * o.orpo_lambda;
  // TRL scales ORPO's rewards by its `beta`, which is λ.
  out.chosen_rewards = chosen_avg.detach() * o.orpo_lambda;
  out.rejected_rewards = rejected_avg.detach() * o.orpo_lambda;
  out.chosen_logps = chosen_avg.detach();
  out.rejected_logps = rejected_avg.detach();
  out.log_odds = log_odds.detach();
  out.log_odds_ratio = ratio.detach();
  return out;
}

}  // namespace

PreferenceLossOutput preference_loss(const PreferenceInputs& inputs, const PreferenceLossOptions& options) {
  check_options(options);
  check_inputs(inputs, options.kind);
  switch (options.kind) {
    case Kind::kDpoSigmoid:
    case Kind::kDpoRobust:
    case Kind::kIpo:
      return dpo_family(inputs, options);
    case Kind::kSimpo:
      return simpo(inputs, options);
    case Kind::kOrpo:
      return orpo(inputs, options);
  }
  FT_CHECK(false, "preference loss: unknown loss kind");
  return {};
}

}  // namespace ft::train

"""TRL's preference losses on given per-sequence log-probabilities, for tests/train/preference_loss_test.cpp.

Usage: preference_ref.py IN.json OUT.json

Each case gives a loss kind, its hyper-parameters, a dtype (float32 | float64) and per-pair inputs: the policy's and
reference's summed completion log-probs, the completion token counts and (ORPO) the chosen NLL. The losses run
through TRL's own code (trl==1.16.0), called on a stand-in `self` that holds only the fields the method reads:
- sigmoid, robust, ipo: DPOTrainer._compute_loss with precomputed reference log-probs and a stand-in model whose
  per-token log-probs sum to the given sums (each sum at one position, zeros elsewhere: the sum is exact);
- cdpo (sigmoid with label smoothing, gone from TRL 1.16's DPOTrainer): CPOTrainer.cpo_loss with loss_type="sigmoid"
  on the policy/reference log-ratios, which is the same expression;
- simpo: CPOTrainer.get_batch_loss_metrics (loss_type="simpo", cpo_alpha=0) over a stand-in concatenated_forward that
  returns the average log-probs sum / count, the last line of CPOTrainer.get_batch_logps;
- orpo: ORPOTrainer.get_batch_loss_metrics over a stand-in concatenated_forward returning the average log-probs and
  the batch NLL (the mean of the per-pair chosen_nll). odds_ratio_loss casts to float32; for float64 cases that cast
  is made a no-op so that the formula is compared at float64 precision.

For each case the output has "per_pair" (every pair run alone: its loss, logged metrics and gradients w.r.t. the
inputs) and "batch" (all pairs together: the batch loss, metrics and gradients of the batch loss). If TRL cannot be
imported, the output is {"skip": reason}."""
import contextlib
import json
import os
import sys
import types
from collections import defaultdict
from functools import partial

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
try:
    import torch
    from trl.experimental.cpo.cpo_trainer import CPOTrainer
    from trl.experimental.orpo.orpo_trainer import ORPOTrainer
    from trl.trainer.dpo_trainer import DPOTrainer
except Exception as e:  # noqa: BLE001 - any import failure means no reference
    DPOTrainer = None
    IMPORT_ERROR = f"{type(e).__name__}: {e}"

GRAD_INPUTS = ("policy_chosen", "policy_rejected", "chosen_nll")


class Accelerator:
    """What the trainers read of accelerate's Accelerator on one process."""

    device = "cpu"

    @staticmethod
    def gather(x):
        return x

    @staticmethod
    def gather_for_metrics(x):
        return x


@contextlib.contextmanager
def float_keeps_float64(enabled):
    """Tensor.float() leaves float64 tensors as they are (ORPOTrainer.odds_ratio_loss upcasts with it)."""
    original = torch.Tensor.float
    if enabled:
        torch.Tensor.float = lambda self, *a, **k: self if self.dtype == torch.float64 else original(self, *a, **k)
    try:
        yield
    finally:
        torch.Tensor.float = original


def leaves(case, dtype, rows):
    """The inputs of the pairs `rows` as tensors; the policy ones (and chosen_nll) require grad."""
    out = {}
    for key in ("policy_chosen", "policy_rejected", "ref_chosen", "ref_rejected", "chosen_nll"):
        if key in case:
            out[key] = torch.tensor([case[key][i] for i in rows], dtype=dtype, requires_grad=key in GRAD_INPUTS)
    for key in ("chosen_tokens", "rejected_tokens"):
        out[key] = torch.tensor([case[key][i] for i in rows], dtype=torch.long)
    return out


def dpo(case, x, dtype):
    """DPOTrainer._compute_loss on a batch [chosen rows, rejected rows] whose per-token log-probs sum to the inputs."""
    n = x["policy_chosen"].numel()
    counts = torch.cat([x["chosen_tokens"], x["rejected_tokens"]])
    width = int(counts.max()) + 1  # position 0 is the prompt
    completion_mask = (torch.arange(width)[None, :] >= 1) & (torch.arange(width)[None, :] <= counts[:, None])
    logps = torch.cat([x["policy_chosen"], x["policy_rejected"]])
    log_probs = torch.cat([logps[:, None], torch.zeros(2 * n, width - 2, dtype=dtype)], dim=1)  # [2P, T-1]

    def model(**kwargs):
        shape = (2 * n, width - 1)
        return types.SimpleNamespace(log_probs=log_probs, entropy=torch.zeros(shape, dtype=dtype),
                                     mean_logits=torch.zeros(shape, dtype=dtype),
                                     is_top1=torch.zeros(shape, dtype=torch.bool))

    metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer = types.SimpleNamespace(
        model=types.SimpleNamespace(training=True), accelerator=Accelerator(), aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=[case["kind"]], loss_weights=[1.0],
        beta=case["beta"], label_smoothing=case["label_smoothing"], use_weighting=False, _metrics=metrics,
        _total_train_tokens=0, _tp_size=1, args=types.SimpleNamespace(discopop_tau=0.05))
    inputs = {"input_ids": torch.zeros(2 * n, width, dtype=torch.long),
              "attention_mask": torch.ones(2 * n, width, dtype=torch.long),
              "completion_mask": completion_mask.long(),
              "ref_chosen_logps": x["ref_chosen"], "ref_rejected_logps": x["ref_rejected"]}
    loss = DPOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)
    return loss, {k: v[0] for k, v in metrics["train"].items()}


def cpo_trainer(case, loss_type):
    trainer = types.SimpleNamespace(alpha=0.0, accelerator=Accelerator(), beta=case["beta"], loss_type=loss_type,
                                    label_smoothing=case["label_smoothing"], simpo_gamma=case.get("simpo_gamma", 0.5),
                                    cpo_alpha=0.0, aux_loss_enabled=False)
    trainer.cpo_loss = partial(CPOTrainer.cpo_loss, trainer)
    return trainer


def cdpo(case, x, dtype):
    """Smoothed sigmoid of the log-ratio difference: CPOTrainer's "sigmoid" on (policy - reference) log-probs."""
    trainer = cpo_trainer(case, "sigmoid")
    chosen_logratios = x["policy_chosen"] - x["ref_chosen"]
    rejected_logratios = x["policy_rejected"] - x["ref_rejected"]
    losses, chosen_rewards, rejected_rewards = CPOTrainer.cpo_loss(trainer, chosen_logratios, rejected_logratios)
    return losses.mean(), {"rewards/chosen": chosen_rewards.mean().item(),
                           "rewards/rejected": rejected_rewards.mean().item()}


def average_logps(x):
    # get_batch_logps(average_log_prob=True): (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
    return x["policy_chosen"] / x["chosen_tokens"], x["policy_rejected"] / x["rejected_tokens"]


def simpo(case, x, dtype):
    trainer = cpo_trainer(case, "simpo")
    chosen, rejected = average_logps(x)
    logits = torch.zeros(1, dtype=dtype)
    trainer.concatenated_forward = lambda model, batch: (chosen, rejected, logits, logits, torch.tensor(0.0))
    return CPOTrainer.get_batch_loss_metrics(trainer, None, None, train_eval="train")


def orpo(case, x, dtype):
    trainer = types.SimpleNamespace(beta=case["orpo_lambda"], accelerator=Accelerator(), aux_loss_enabled=False)
    trainer.odds_ratio_loss = partial(ORPOTrainer.odds_ratio_loss, trainer)
    chosen, rejected = average_logps(x)
    logits = torch.zeros(1, dtype=dtype)
    nll = x["chosen_nll"].mean()
    trainer.concatenated_forward = lambda model, batch: (chosen, rejected, logits, logits, nll)
    with float_keeps_float64(dtype == torch.float64):
        return ORPOTrainer.get_batch_loss_metrics(trainer, None, None, train_eval="train")


LOSSES = {"sigmoid": dpo, "robust": dpo, "ipo": dpo, "cdpo": cdpo, "simpo": simpo, "orpo": orpo}


def run(case, rows):
    dtype = {"float32": torch.float32, "float64": torch.float64}[case["dtype"]]
    x = leaves(case, dtype, rows)
    loss, metrics = LOSSES[case["kind"]](case, x, dtype)
    loss.backward()
    grads = {k: x[k].grad.tolist() for k in GRAD_INPUTS if k in x and x[k].grad is not None}
    return {"loss": loss.item(), "metrics": {k: float(v) for k, v in metrics.items()}, "grads": grads}


def per_pair(case):
    runs = [run(case, [i]) for i in range(len(case["policy_chosen"]))]
    return {"loss": [r["loss"] for r in runs],
            "metrics": {k: [r["metrics"][k] for r in runs] for k in runs[0]["metrics"]},
            "grads": {k: [r["grads"][k][0] for r in runs] for k in runs[0]["grads"]}}


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    if DPOTrainer is None:
        out = {"skip": f"TRL cannot be imported ({IMPORT_ERROR})"}
    else:
        out = {"cases": [{"per_pair": per_pair(c), "batch": run(c, range(len(c["policy_chosen"])))}
                         for c in cfg["cases"]]}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()

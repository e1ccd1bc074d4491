"""Reference training run in PyTorch + transformers for the loop parity test.

Creates a tiny random Llama in MODEL_DIR and a pretokenized uint16 token file, or (with --train) trains it the way
`finetune train` is configured by the test: rows of seq_len tokens in file order, micro-batches, gradient
accumulation, the loss normalised by the target tokens of each optimizer step, AdamW (fused semantics), linear warmup
then cosine decay, clipping by global norm. Prints one JSON list of the per-step losses.
"""
import argparse
import json
import math

import os

import numpy as np
import sentencepiece as spm
import torch
import transformers


def make(model_dir, data_file, vocab, seed):
    os.makedirs(model_dir, exist_ok=True)
    text = os.path.join(model_dir, "corpus.txt")
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    rng = np.random.default_rng(seed)
    with open(text, "w") as f:
        for _ in range(2000):
            f.write(" ".join(rng.choice(words, size=8)) + "\n")
    spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(model_dir, "tokenizer"), vocab_size=vocab,
                                   model_type="bpe", bos_id=1, eos_id=2, unk_id=0, pad_id=3,
                                   hard_vocab_limit=False, minloglevel=2)
    os.remove(text)
    os.remove(os.path.join(model_dir, "tokenizer.vocab"))
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                                   bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(model_dir, safe_serialization=True)
    # Some structure so that the loss actually falls: a noisy repeating pattern.
    pieces = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model")).get_piece_size()
    top = min(vocab, pieces)  # every id must be a piece of the tokenizer the trainer loads
    base = np.tile(np.arange(3, top, dtype=np.uint16), 200)
    noise = rng.integers(3, top, size=base.shape, dtype=np.uint16)
    tokens = np.where(rng.random(base.shape) < 0.2, noise, base).astype(np.uint16)
    tokens.tofile(data_file)


def lr_at(step, peak, warmup, total, min_ratio):
    if step < warmup:
        return peak * step / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def train(model_dir, data_file, seq_len, micro, accum, steps, lr, warmup, min_ratio, clip, wd):
    torch.use_deterministic_algorithms(True)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                          attn_implementation="sdpa")
    model.train()
    tokens = torch.from_numpy(np.fromfile(data_file, dtype=np.uint16).astype(np.int64))
    rows = tokens[: (tokens.numel() // seq_len) * seq_len].view(-1, seq_len)
    no_decay = [p for n, p in model.named_parameters() if n.endswith("norm.weight") or "embed_tokens" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("norm.weight") or "embed_tokens" in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    losses = []
    cursor = 0
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, lr, warmup, steps, min_ratio)
        batches = []
        for _ in range(accum):
            if cursor + micro > rows.shape[0]:
                cursor = 0
            batches.append(rows[cursor: cursor + micro])
            cursor += micro
        n_tokens = sum(b[:, 1:].numel() for b in batches)
        total = 0.0
        for b in batches:
            logits = model(input_ids=b).logits.float()
            loss_sum = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                         b[:, 1:].reshape(-1), reduction="sum")
            (loss_sum / n_tokens).backward()
            total += loss_sum.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total / n_tokens)
    print(json.dumps(losses))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--make", action="store_true")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--vocab", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--micro", type=int, default=2)
    p.add_argument("--accum", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--min-ratio", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=0.5)
    p.add_argument("--wd", type=float, default=0.1)
    a = p.parse_args()
    if a.make:
        make(a.model_dir, a.data, a.vocab, a.seed)
    else:
        train(a.model_dir, a.data, a.seq_len, a.micro, a.accum, a.steps, a.lr, a.warmup, a.min_ratio, a.clip, a.wd)

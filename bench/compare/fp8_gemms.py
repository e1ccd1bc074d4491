#!/usr/bin/env python3
"""fp8_gemms.py [--tokens N] [--hidden H] [--inter I] [--heads Q --kv-heads KV]: the GEMMs of one decoder layer's
trainable projections (Llama-3.2-1B's shape at 8 x 2048 tokens by default, workload (b)) in bf16 (torch.mm) and in
FP8 with tensorwise scales (torch._scaled_mm on codes cast beforehand: e4m3 x and W, e5m2 dy; the forward with fast
accumulation, the backward without, as train.fp8 runs them). Forward (y = x W^T), input gradient (dx = dy W) and
weight gradient (dW = dy^T x) per projection, then q/k/v and gate/up as separate GEMMs against one GEMM of their
concatenated weights. What the FP8 GEMMs can save per step at most (issue #33); the casts come on top. Prints one
Markdown table."""
import argparse

import torch

import cuda_timing

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=16384)
p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--inter", type=int, default=8192)
p.add_argument("--heads", type=int, default=32)
p.add_argument("--kv-heads", type=int, default=8)
p.add_argument("--layers", type=int, default=16)
p.add_argument("--iters", type=int, default=20)
a = p.parse_args()

torch.manual_seed(0)
dev, bf16 = "cuda", torch.bfloat16
e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
one = torch.ones((), device=dev)


def timed(fn):
    return cuda_timing.timed(fn, a.iters)


def codes(t, dtype):  # a contiguous FP8 copy (the values do not matter for speed)
    return (t * 0.5).to(dtype).contiguous()


def gemms(n_tok, k, n):
    """ms of (forward, dgrad, wgrad) in bf16 and FP8 for x [n_tok, k], W [n, k]."""
    x = torch.randn(n_tok, k, device=dev, dtype=bf16)
    w = torch.randn(n, k, device=dev, dtype=bf16) * 0.02
    dy = torch.randn(n_tok, n, device=dev, dtype=bf16)
    w_t = w.t().contiguous()  # [k, n]
    bf = (timed(lambda: torch.mm(x, w.t())), timed(lambda: torch.mm(dy, w)), timed(lambda: torch.mm(dy.t(), x)))
    xq, wq, dyq = codes(x, e4m3), codes(w, e4m3), codes(dy, e5m2)
    xq_t, wq_t, dyq_t = xq.t().contiguous(), wq.t().contiguous(), dyq.t().contiguous()
    f8 = (timed(lambda: torch._scaled_mm(xq, wq.t(), one, one, out_dtype=bf16, use_fast_accum=True)),
          timed(lambda: torch._scaled_mm(dyq, wq_t.t(), one, one, out_dtype=bf16)),
          timed(lambda: torch._scaled_mm(dyq_t, xq_t.t(), one, one, out_dtype=torch.float32)))
    return bf, f8


head_dim = a.hidden // a.heads
kv = a.kv_heads * head_dim
projections = [("q", a.hidden, a.hidden), ("k", a.hidden, kv), ("v", a.hidden, kv), ("o", a.hidden, a.hidden),
               ("gate", a.hidden, a.inter), ("up", a.hidden, a.inter), ("down", a.inter, a.hidden)]
fused = [("qkv fused", a.hidden, a.hidden + 2 * kv), ("gate_up fused", a.hidden, 2 * a.inter)]

print(f"| GEMM ({a.tokens} tokens) | K -> N | bf16 fwd / dgrad / wgrad ms | FP8 fwd / dgrad / wgrad ms | "
      "bf16 / FP8 |")
print("|---|---|---|---|---|")
total_bf, total_f8 = 0.0, 0.0
for i, (name, k, n) in enumerate(projections + fused):
    bf, f8 = gemms(a.tokens, k, n)
    if i < len(projections):  # the layer's total counts the separate projections only
        total_bf, total_f8 = total_bf + sum(bf), total_f8 + sum(f8)
    print(f"| {name} | {k} -> {n} | {' / '.join(f'{t:.3f}' for t in bf)} | {' / '.join(f'{t:.3f}' for t in f8)} | "
          f"{sum(bf) / sum(f8):.2f} |")
print(f"\nper layer (separate projections): bf16 {total_bf:.2f} ms, FP8 {total_f8:.2f} ms; x {a.layers} layers: "
      f"bf16 {total_bf * a.layers:.1f} ms, FP8 {total_f8 * a.layers:.1f} ms per step")

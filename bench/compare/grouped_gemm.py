#!/usr/bin/env python3
"""grouped_gemm.py [--tokens N] [--experts E] [--top-k K] [--hidden H] [--inter I]: the experts' GEMMs of one MoE
layer (Qwen3-30B-A3B's shape by default, 4 x 2048 tokens) as torch._grouped_mm over routed slices (the kernel
finetune's ops::grouped_gemm calls), beside one dense torch.mm of the same rows and FLOPs: issue #35's measure of
the grouped GEMMs (at least 60 % of the dense throughput). Forward gate_up and down, and the input-gradient GEMMs
of both (a frozen base under LoRA). Prints one Markdown table."""
import argparse

import torch

import cuda_timing

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=8192)
p.add_argument("--experts", type=int, default=128)
p.add_argument("--top-k", type=int, default=8)
p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--inter", type=int, default=768)
p.add_argument("--iters", type=int, default=20)
a = p.parse_args()

torch.manual_seed(0)
dev, bf16 = "cuda", torch.bfloat16
slots = a.tokens * a.top_k
# Routing of random logits: the slices' lengths vary as a trained router's would (none is empty at this size).
choice = torch.randn(a.tokens, a.experts, device=dev).topk(a.top_k, -1).indices.reshape(-1)
counts = torch.bincount(choice, minlength=a.experts)
ends = counts.cumsum(0).to(torch.int32)


def timed(fn):
    return cuda_timing.timed(fn, a.iters)


rows = []
for name, k, n in [("gate_up", a.hidden, 2 * a.inter), ("down", a.inter, a.hidden),
                   ("gate_up dx", 2 * a.inter, a.hidden), ("down dx", a.hidden, a.inter)]:
    x = torch.randn(slots, k, device=dev, dtype=bf16)
    w = torch.randn(a.experts, n, k, device=dev, dtype=bf16) * 0.02
    dense_w = w[0]
    grouped = timed(lambda: torch._grouped_mm(x, w.transpose(-2, -1), ends))
    dense = timed(lambda: torch.mm(x, dense_w.t()))
    flops = 2.0 * slots * k * n
    rows.append((name, slots, k, n, grouped, dense, flops))

print(f"| GEMM ({a.experts} experts, top-{a.top_k}, {a.tokens} tokens) | M x K x N | grouped ms | TF/s | "
      "dense ms | TF/s | grouped / dense |")
print("|---|---|---|---|---|---|---|")
for name, m, k, n, g, d, f in rows:
    print(f"| {name} | {m} x {k} x {n} | {g:.3f} | {f / g / 1e9:.0f} | {d:.3f} | {f / d / 1e9:.0f} | {d / g:.2f} |")

"""Prints bench/compare's table from results.jsonl: tokens/s, MFU, peak allocated/reserved GiB per runner, and
finetune's ratio to the best contender of the same workload. MFU uses src/metrics/mfu.h's formula for every runner:
(6N, or 4N + 6A with a frozen LoRA base) + 12 L H T FLOPs per token over 989 TFLOP/s."""
import json
import sys

SHAPES = {  # layers, hidden, intermediate, vocab, heads, kv heads, seq, lora adapter params (0 = full training)
    "a": (12, 768, 2048, 50304, 12, 12, 1024, 0),
    "b": (16, 2048, 8192, 128256, 32, 8, 2048, 0),
    "c": (32, 4096, 14336, 128256, 32, 8, 2048, 41943040),
}


def flops_per_token(layers, hidden, inter, vocab, heads, kv, seq, adapters):
    hd = hidden // heads
    n = layers * (2 * hidden * hidden + 2 * hidden * kv * hd + 3 * hidden * inter) + vocab * hidden
    return (4 * n + 6 * adapters if adapters else 6 * n) + 12 * layers * hidden * seq


rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| workload | runner | tokens/s | MFU | peak allocated GiB | peak reserved GiB | finetune / best contender |")
print("|---|---|---|---|---|---|---|")
for w in sorted({r["workload"] for r in rows}):
    group = [r for r in rows if r["workload"] == w]
    best = max((r["tokens_per_s"] for r in group if r["runner"] != "finetune"), default=None)
    for r in group:
        mfu = r.get("mfu")
        if mfu is None and w in SHAPES:
            mfu = r["tokens_per_s"] * flops_per_token(*SHAPES[w]) / 989e12
        ratio = f"{r['tokens_per_s'] / best:.2f}x" if best and r["runner"] == "finetune" else ""
        reserved = r.get("peak_reserved_gib")
        print(f"| {w} | {r.get('name', r['runner']) if r['runner'] == 'finetune' else r['runner']} | "
              f"{r['tokens_per_s']:,.0f} | {f'{mfu:.1%}' if mfu else ''} | {r['peak_alloc_gib']:.1f} | "
              f"{'' if reserved is None else f'{reserved:.1f}'} | {ratio} |")

# The time from the launch to the end of the first optimizer step (process start, imports, model build or load,
# data, first step), where the runs logged it.
timed = [r for r in rows if r.get("first_step_s") is not None]
if timed:
    print()
    print("| workload | runner | time to the first step, s |")
    print("|---|---|---|")
    for r in timed:
        who = r.get("name", r["runner"]) if r["runner"] == "finetune" else r["runner"]
        print(f"| {r['workload']} | {who} | {r['first_step_s']:.1f} |")

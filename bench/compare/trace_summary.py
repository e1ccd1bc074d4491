#!/usr/bin/env python3
"""trace_summary.py TRACE[.json|.json.gz] [--steps N] [--top K]: where the GPU time of a Kineto trace goes.

Sums the durations of CUDA kernels and memcpy/memset events by name (templates shortened), divided by the number of
traced optimizer steps, and prints a Markdown table: ms per step, share of the GPU-busy time, calls per step. The
last line compares GPU-busy time with the wall time the trace spans (idle gaps = launch or host overhead). With
--cpu K, also the K host operators with the most time in them (nested ones count inside their callers too)."""
import argparse
import collections
import gzip
import json
import re


def short(name: str) -> str:
    """The kernel's name without template arguments and parameter list."""
    name = name.replace("(anonymous namespace)", "anon")
    out, depth = [], 0
    for ch in name:
        depth += ch in "<("
        if depth == 0:
            out.append(ch)
        depth -= ch in ">)"
    return re.sub(r"^void ", "", "".join(out)).strip()[:90]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cpu", type=int, default=0)
    args = ap.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        print("no GPU events in", args.trace)
        return
    total = collections.Counter()
    calls = collections.Counter()
    for e in gpu:
        total[short(e["name"])] += e["dur"]
        calls[short(e["name"])] += 1
    busy = sum(total.values())
    span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    print(f"| kernel | ms/step | share | calls/step |\n|---|---:|---:|---:|")
    for name, us in total.most_common(args.top):
        print(f"| `{name}` | {us / 1e3 / args.steps:.2f} | {100 * us / busy:.1f} % | {calls[name] / args.steps:.0f} |")
    print(f"\nGPU busy {busy / 1e3 / args.steps:.1f} ms/step of a {span / 1e3 / args.steps:.1f} ms/step span "
          f"({100 * busy / span:.0f} %), {len(gpu) / args.steps:.0f} GPU events per step")
    if args.cpu:
        host = collections.Counter()
        for e in events:
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"):
                host[f'{e["cat"]}: {short(e["name"])}'] += e["dur"]
        print(f"\n| host operator | ms/step |\n|---|---:|")
        for name, us in host.most_common(args.cpu):
            print(f"| `{name}` | {us / 1e3 / args.steps:.1f} |")


if __name__ == "__main__":
    main()

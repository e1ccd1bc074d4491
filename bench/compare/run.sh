#!/usr/bin/env bash
# bench/compare/run.sh OUT [WORKLOAD...]: `finetune train` side by side with its Python contenders (transformers
# eager, transformers + torch.compile, PEFT for LoRA) on one GPU, same shapes, batch and precision; prints one table
# (tokens/s, MFU, peak allocated/reserved GiB, our ratio to the best contender) and writes it to OUT/compare.md.
# Workloads (docs/benchmarks.md): a = Llama of GPT-2-small shape, b = Llama-3.2-1B shape, c = Llama-3-8B LoRA r16,
# d = a and b on packed short samples (c also times the contenders' load of its model directory and the files'
# read, into OUT/read-c.txt), f8 = c on an FP8 base (model.quantize: fp8) beside c, c's compiled
# contender and PEFT on torchao's per-row float8 base (F8_MODES, default eager and compile), q = c on an NF4 base
# (model.quantize: nf4) with its GEMMs in bf16 and in FP8 (model.nf4_compute; Q_COMPUTE, default dtype fp8; the
# contender (Q_MODES, default eager and compile): PEFT on transformers' bitsandbytes 4-bit model), qloss = q on real
# text for 200 steps with model.nf4_compute dtype and fp8, and the loss gap (OUT/qloss.md), q70 = configs/llama3-70b-qlora.yaml on Llama-3-70B's shape with 16 of its
# 80 layers (against the same contender with gradient checkpointing), f70 = q70 with an FP8 base beside the NF4 one
# (finetune only), dpo = configs/llama3-8b-dpo-lora.yaml on the
# Llama-3-8B shape beside itself with precomputed reference log-probs, its SimPO step, SFT over the same tokens and TRL's DPOTrainer + PEFT (contender_dpo.py;
# DPO_MODES=eager to skip torch.compile), ds = a and b on packed samples of 8-32 tokens, 7b = the llama2/mistral/qwen2.5 7B LoRA configs (finetune only),
# 8b = configs/llama3-8b-lora.yaml and llama3-8b-full.yaml (finetune only), 8b-loss = llama3-8b-full.yaml on real text
# for 200 steps, F32 master weights against bf16 weights with Kahan / 8-bit moments (OUT/8b-loss.md; LOSS_LAYERS,
# OPT_VARIANTS), 8b-opt = llama3-8b-full.yaml with bf16
# weights instead of F32 master weights: bf16-pure, bf16-pure with Kahan-compensated AdamW, and the same with 8-bit
# AdamW moments (optimizer.name adamw_8bit; OPT_VARIANTS picks among pure kahan kahan8), 8b-f8 = the same
# bf16-pure run with bf16 GEMMs and with train.fp8: tensorwise (fits an 80 GB card; F8B_PRECISION=bf16 for F32
# master weights under autocast, 120 GiB) against transformers with bf16 weights under torchao's float8 training +
# compile (F8B_RECIPES, default tensorwise),
# g2 / g3 = configs/gemma-2-2b-lora.yaml / gemma-3-1b-lora.yaml on a random model of that shape (unpacked, no
# activation checkpointing, as the contender),
# a-aten / b-aten = a / b with train.fused_kernels=false,
# ckpt = the training stall of one checkpoint of b (checkpoint.async on and off) beside transformers' Trainer save
# and the disk's sequential write bandwidth (dd, O_DIRECT); rows in OUT/ckpt.md; ckpt-c = the same stall for c.
# Needs: a built finetune ($FT_BIN, default build-gpu/bin/finetune), python3 with torch, transformers and peft,
# and .gpu/tokenizer.model (any sentencepiece model: the token ids are random anyway).
# moe = configs/qwen3-30b-a3b-lora.yaml on Qwen3-30B-A3B's shape with MOE_LAYERS (default 12) of its 48 layers, against
# PEFT (attention and the experts' fused weights through target_parameters) with gradient checkpointing, eager and
# compiled (MOE_MODES, default eager compile),
# moe48 = the same config on all 48 layers (model.random_weights: no files; finetune only: does a 30B-A3B LoRA fit),
# moe-nf4 / moe48-nf4 = moe / moe48 with model.quantize: nf4 (the experts in 4 bits too; finetune only),
# o70 = q70 at 8,192 tokens per row, with model.activation_offload off and on (finetune only), q70-80 = the same
# config on all 80 layers (model.random_weights: no files; 2 x 2048, and 1 x 8,192 with offload; finetune only),
# f8loss = b on real text (the Python standard library's sources) for 300 steps, bf16 and train.fp8=tensorwise, with
# the relative loss gap at every logged step (OUT/f8loss.md; F8LOSS_FP8_ARGS: more overrides for the FP8 run, e.g.
# 'train.fp8_skip=[layers.0.,layers.15.]'), f16loss = the same text and steps in bf16 and in fp16 (dynamic loss
# scaling), with the gap, the fp16 run's skipped steps and last loss scale (OUT/f16loss.md),
# f8t = b with train.fp8 (F8T_RECIPES, default tensorwise rowwise; F8T_ARGS: more overrides for those runs, e.g.
# train.fp8_edge_layers=0) beside b, against torchao's float8 training + torch.compile (torchao importable: a carried
# wheel),
# Env: STEPS (optimizer steps measured after 5 warm-up steps, a multiple of 5, default 10), CONTENDERS=0 to skip the Python side,
# FT_ARGS: more overrides for every finetune run that ft times (e.g. model.nf4_compute=fp8 for q70-80),
# LIGER=1 to add transformers + Liger's kernels + torch.compile (eager where compiling fails) to a, b and c
# (liger-kernel importable: a carried wheel), PROFILE=1 to also write a Kineto trace of two steps of each finetune
# run into OUT (PROFILE=first: of the first step, whose time then counts the tracing), SHAPES_7B to run some of the
# 7b configs, KEEP_MODELS=1 to keep their random models for a later call.
set -uo pipefail
out=${1:?usage: bench/compare/run.sh OUT [a b c d 7b 8b g2 g3]}
shift
workloads=("$@")
((${#workloads[@]})) || workloads=(a b c d)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
bin=${FT_BIN:-build-gpu/bin/finetune}
steps=${STEPS:-10}
# A run is stopped once step 5 + STEPS is logged, and runs log every 5 steps.
((steps % 5 == 0 && steps > 0)) || { echo "run.sh: STEPS must be a positive multiple of 5 (got $steps)" >&2; exit 2; }
work=/tmp/ft-compare
mkdir -p "$work" "$out"
tok=$root/.gpu/tokenizer.model
results=$out/results.jsonl
: >"$results"

# Random token ids below the tokenizer's vocabulary (the model's vocabulary is set separately; only speed matters).
python3 - "$work" "${workloads[*]}" <<'PY'
import json, sys, numpy as np
rng = np.random.default_rng(0)
rng.integers(3, 250, size=64 * 2048 * 64, dtype=np.uint16).tofile(f"{sys.argv[1]}/random.u16")
words = [str(d) for d in range(10)] + ["alpha", "beta", "gamma", "delta"]
with open(f"{sys.argv[1]}/short.jsonl", "w") as f:   # documents of ~50-600 tokens for packing
    for _ in range(40000):
        n = int(rng.integers(25, 300))
        f.write('{"text": "' + " ".join(rng.choice(words, n)) + '"}\n')
if "dpo" in sys.argv[2].split():  # preference pairs: prompts of ~500 tokens, each sequence cut to 1024 tokens
    with open(f"{sys.argv[1]}/pairs.jsonl", "w") as f:
        for _ in range(400):
            prompt, chosen, rejected = (" ".join(rng.choice(words, n)) for n in (210, 250, 250))
            f.write(json.dumps(dict(prompt=prompt, chosen=" " + chosen, rejected=" " + rejected)) + "\n")
if {"f8loss", "f16loss", "qloss", "8b-loss"} & set(sys.argv[2].split()):  # real text: the Python standard library's sources,
    import pathlib, sysconfig  # 4,000 records of <= 6,000 characters (a little over 300 steps of 8 x 2048 tokens)
    records = []
    for src in sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        text = src.read_text(errors="replace")
        records += [text[i:i + 6000] for i in range(0, len(text), 6000)]
    with open(f"{sys.argv[1]}/stdlib.jsonl", "w") as f:
        for text in records[:4000]:
            f.write(json.dumps({"text": text}) + "\n")
if "ds" in sys.argv[2].split():  # documents of ~8-32 tokens (short SFT samples), for the ds workload only
    with open(f"{sys.argv[1]}/tiny.jsonl", "w") as f:
        for _ in range(400000):
            n = int(rng.integers(4, 16))
            f.write('{"text": "' + " ".join(rng.choice(words, n)) + '"}\n')
PY

shape_a=(model.hidden_size=768 model.intermediate_size=2048 model.num_layers=12 model.num_heads=12
         model.num_kv_heads=12 model.vocab_size=50304 model.tie_embeddings=true model.max_position_embeddings=1024)
shape_b=(model.hidden_size=2048 model.intermediate_size=8192 model.num_layers=16 model.num_heads=32
         model.num_kv_heads=8 model.vocab_size=128256 model.tie_embeddings=true model.rope_theta=500000
         model.max_position_embeddings=2048)
scratch=(--config bench/compare/scratch.yaml)
common=(run.device=cuda:0 tokenizer.path="$tok" "data.eval=[]" eval.every_steps=0 checkpoint.every_steps=0
        checkpoint.resume=never train.precision=bf16 train.grad_clip=1.0 optimizer.lr=1e-4 scheduler.type=constant
        scheduler.warmup_steps=0 scheduler.warmup_ratio=0 logging.every_steps=5 logging.progress=off
        data.cache_dir="$work/cache")
pretok=("data.train=[{path: $work/random.u16, format: pretokenized}]" data.pretokenized_dtype=uint16)
packed=("data.train=[{path: $work/short.jsonl, format: text}]" data.packing=true)
packed_tiny=("data.train=[{path: $work/tiny.jsonl, format: text}]" data.packing=true)
# (b) on real text for 300 steps (f8loss, f16loss)
stdlib_b=("${scratch[@]}" "${shape_b[@]}" "data.train=[{path: $work/stdlib.jsonl, format: text}]" data.packing=true
          data.seq_len=2048 train.micro_batch_size=8 train.max_steps=300 scheduler.type=cosine scheduler.warmup_steps=30
          optimizer.lr=3e-4 logging.every_steps=10)

# stop_once_logged PID METRICS STEP [LOG]: kills PID (a finetune run) once METRICS (its metrics.jsonl) has a record of
# STEP and, with LOG, once LOG says the profiler wrote its trace; returns 0 then, else the run's own exit status.
stop_once_logged() {
  local pid=$1 metrics=$2 step=$3 log=${4:-}
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q "\"step\":$step," "$metrics" 2>/dev/null && { [[ -z $log ]] || grep -q "profiler: wrote" "$log"; }; then
      kill -9 "$pid"
      wait "$pid" 2>/dev/null
      return 0
    fi
    sleep 1
  done
  wait "$pid"
}

# ft NAME WORKLOAD --config FILE ARGS...: one finetune run, killed once step 5 + STEPS is logged (no final checkpoint).
ft() {
  local name=$1 workload=$2; shift 2
  local last=$((5 + steps)) prof=()
  # The traced steps come after the measured ones (tracing slows them).
  [[ ${PROFILE:-0} == 1 ]] && prof=(train.profile_start_step=$((last + 1)) train.profile_steps=2)
  [[ ${PROFILE:-0} == first ]] && prof=(train.profile_start_step=1 train.profile_steps=1)
  rm -rf "$work/$name"
  local launch
  launch=$(date +%s.%N)
  # The workload's own arguments after the common ones, so that they win (train.precision of a config, say).
  "$bin" train "${common[@]}" "$@" ${FT_ARGS:-} train.max_steps=$((last + 100)) \
    run.output_dir="$work/$name" "${prof[@]}" >"$out/$name.log" 2>&1 &
  stop_once_logged $! "$work/$name/metrics.jsonl" $last "$([[ ${PROFILE:-0} == 0 ]] || echo "$out/$name.log")"
  python3 - "$work/$name/metrics.jsonl" "$name" "$workload" "$steps" "$launch" >>"$results" <<'PY' || tail -5 "$out/$name.log"
import json, sys
path, name, workload, steps, launch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
lines = [json.loads(l) for l in open(path)]
ev = [e for e in lines if e.get("event") == "train"]
start = [e for e in lines if e.get("event") == "start"]
last = [e for e in ev if 5 < e["step"] <= 5 + steps]   # the log intervals after the 5 warm-up steps
tps = sum(e["tokens_per_s"] for e in last) / len(last)
print(json.dumps(dict(workload=workload, runner="finetune", name=name, tokens_per_s=tps,
                      step_s=sum(e["step_time_s"] for e in last) / len(last), mfu=last[-1].get("mfu"),
                      peak_alloc_gib=last[-1]["peak_memory_gib"], peak_reserved_gib=last[-1].get("peak_reserved_gib"),
                      step_peak_alloc_gib=last[-1].get("step_peak_memory_gib"),
                      first_step_s=start[0]["time"] - launch if start else None)))
PY
  if [[ ${PROFILE:-0} != 0 ]]; then
    for f in "$work/$name"/profile/*.json; do [[ -f $f ]] && gzip -c "$f" >"$out/$name.trace.json.gz"; done
  fi
  rm -rf "${work:?}/$name"  # a killed run leaves no checkpoint, but the disk is shared with the random models
}

# loss_curve NAME ARGS...: one whole finetune run (ARGS set train.max_steps=N), its train records into
# OUT/NAME.loss.jsonl. The run is stopped once step N is logged: the final checkpoint it would write next costs time
# and disk only (12 layers of Llama-3-8B with F32 masters: 44 GB, which filled the GPU host's disk).
loss_curve() {
  local name=$1 arg last=0; shift
  for arg in "$@"; do [[ $arg == train.max_steps=* ]] && last=${arg#train.max_steps=}; done
  ((last > 0)) || { echo "loss_curve $name: give train.max_steps=N" >&2; return 2; }
  rm -rf "$work/$name"
  "$bin" train "${common[@]}" "$@" run.output_dir="$work/$name" >"$out/$name.log" 2>&1 &
  stop_once_logged $! "$work/$name/metrics.jsonl" "$last" || tail -5 "$out/$name.log"
  grep '"event":"train"' "$work/$name/metrics.jsonl" >"$out/$name.loss.jsonl"
  rm -rf "${work:?}/$name"
}

# loss_gap REF.loss.jsonl OTHER.loss.jsonl LABEL [REF_LABEL, default bf16]: a markdown table of both losses and their
# relative gap every 50 steps, the gap at the last step and of the mean loss over the last quarter of the logged steps,
# the largest gap after the warm-up (step 30), and the other run's skipped steps and last loss scale.
loss_gap() {
  python3 - "$@" <<'PY'
import json, sys
ref, other = ({e["step"]: e for e in map(json.loads, open(p))} for p in sys.argv[1:3])
label = sys.argv[3]
ref_label = sys.argv[4] if len(sys.argv) > 4 else "bf16"
print(f"| step | {ref_label} loss | {label} loss | gap | {ref_label} tok/s | {label} tok/s |\n|---|---|---|---|---|---|")
gaps = []
steps = sorted(set(ref) & set(other))
if not steps:
    sys.exit(f"no logged step in both runs ({len(ref)} and {len(other)} records): a run failed, see its log")
for step in steps:
    a, b = ref[step], other[step]
    gap = (b["loss"] - a["loss"]) / a["loss"]
    if step > 30:  # after the warm-up
        gaps.append(abs(gap))
    if step % 50 == 0 or step == 10:
        print(f"| {step} | {a['loss']:.4f} | {b['loss']:.4f} | {100 * gap:+.2f} % | {a['tokens_per_s']:,.0f} | "
              f"{b['tokens_per_s']:,.0f} |")
final = (other[steps[-1]]["loss"] - ref[steps[-1]]["loss"]) / ref[steps[-1]]["loss"]
# One step's loss moves with its batch; the mean over the last quarter of the logged steps is the steadier comparison.
tail = steps[-max(1, len(steps) // 4):]
ref_tail, other_tail = (sum(run[s]["loss"] for s in tail) / len(tail) for run in (ref, other))
last = other[max(other)]
print(f"\ngap at the last logged step ({steps[-1]}): {100 * final:+.2f} %; of the mean loss over steps {tail[0]}-"
      f"{tail[-1]} ({len(tail)} logged): {100 * (other_tail - ref_tail) / ref_tail:+.2f} % ({ref_tail:.4f} and "
      f"{other_tail:.4f}); largest gap after the warm-up: {100 * max(gaps):.2f} % over {len(gaps)} logged steps; mean "
      f"{100 * sum(gaps) / len(gaps):.2f} %; {label}: {last.get('skipped_steps', 0)} skipped steps, last loss scale "
      f"{last.get('loss_scale')}")
PY
}

# ckpt_stall NAME STOP ARGS...: 60 steps with a checkpoint at step 30; the stall is the time between the step-30 and
# step-31 records less step 31's own time; the write time and bandwidth come from the "checkpoint saved" log line.
# STOP=1 kills the run once step 32 is logged (a synchronous save has nothing left to show after it).
ckpt_stall() {
  local name=$1 stop=$2; shift 2
  rm -rf "$work/$name"
  "$bin" train "$@" "${common[@]}" train.max_steps=60 checkpoint.every_steps=30 checkpoint.keep_last=1 \
    logging.every_steps=1 run.output_dir="$work/$name" >"$out/$name.log" 2>&1 &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do
    if [[ $stop == 1 ]] && grep -q '"step":32,' "$work/$name/metrics.jsonl" 2>/dev/null; then kill -9 $pid; break; fi
    sleep 0.5
  done
  wait $pid 2>/dev/null
  python3 - "$work/$name/metrics.jsonl" "$out/$name.log" "$name" >>"$out/ckpt.jsonl" <<'PY'
import json, re, sys
ev = {e["step"]: e for e in map(json.loads, open(sys.argv[1])) if e.get("event") == "train"}
saved = [l for l in open(sys.argv[2]) if "checkpoint saved" in l and "step-000030" in l]
m = re.search(r"\(([\d.]+) GB written in ([\d.]+) s", saved[0]) if saved else None
# The worst time between two records before the save (steps 3-29) beyond the step itself: a hiccup outside the
# checkpoint (the pinned blocks are reserved after the first step) shows here.
other = max(ev[s]["time"] - ev[s - 1]["time"] - ev[s]["step_time_s"] for s in range(3, 30))
print(json.dumps(dict(name=sys.argv[3], stall_s=ev[31]["time"] - ev[30]["time"] - ev[31]["step_time_s"],
                      step_s=ev[31]["step_time_s"], worst_other_gap_s=other, gb=float(m.group(1)) if m else None,
                      write_s=float(m.group(2)) if m else None)))
PY
  rm -rf "$work/$name"
}

contender() {  # WORKLOAD MODE [ARGS...]
  [[ ${CONTENDERS:-1} == 0 ]] && return
  FT_LAUNCH_TIME=$(date +%s.%N) python3 bench/compare/contender.py "$1" --mode "$2" --steps "$steps" "${@:3}" \
    >>"$results" 2>"$out/py-$1-$2.log" ||
    tail -3 "$out/py-$1-$2.log"
}

liger() {  # WORKLOAD [ARGS...]: the compiled contender with Liger's kernels (LIGER=1; liger-kernel importable),
  # else the eager one: with torch 2.11, dynamo cannot trace liger-kernel 0.8.5's fused linear cross-entropy
  # (addmm with out_dtype on fake tensors; 2026-12-06), so the compiled run fails before its first step
  [[ ${LIGER:-0} == 1 && ${CONTENDERS:-1} != 0 ]] || return 0
  local mode
  for mode in compile eager; do
    FT_LAUNCH_TIME=$(date +%s.%N) python3 bench/compare/contender.py "$1" --mode "$mode" --liger --steps "$steps" \
      "${@:2}" >>"$results" 2>"$out/py-$1-liger-$mode.log" && return 0
    echo "liger $1 $mode failed: $(grep -m1 -E 'Error|error' "$out/py-$1-liger-$mode.log" | cut -c1-200)"
  done
}

opt_variant() {  # VARIANT: sets opt to the overrides of llama3-8b-full.yaml's optimizer variant: f32 (the config as
  # it ships: F32 master weights and moments, bf16 autocast), pure (bf16-pure), kahan (bf16 weights, Kahan-compensated
  # AdamW), kahan8 (the same with 8-bit moments, optimizer.name adamw_8bit)
  case $1 in
    f32) opt=(train.precision=bf16) ;;
    pure) opt=(train.precision=bf16-pure optimizer.kahan_summation=false) ;;
    kahan) opt=(train.precision=bf16-pure optimizer.kahan_summation=true) ;;
    kahan8) opt=(train.precision=bf16-pure optimizer.kahan_summation=true optimizer.name=adamw_8bit) ;;
    *) echo "run.sh: OPT_VARIANTS: unknown variant '$1' (pure, kahan, kahan8)" >&2; return 2 ;;
  esac
}

random_model() {  # SHAPE: a random bf16 Hugging Face model directory at $work/model-SHAPE
  [[ -d $work/model-$1 ]] || python3 bench/make_random_hf_model.py "$1" "$work/model-$1" --tokenizer "$tok" >/dev/null
}

for w in "${workloads[@]}"; do
  case $w in
  a) ft a a "${scratch[@]}" "${shape_a[@]}" "${pretok[@]}" data.seq_len=1024 train.micro_batch_size=32
     contender a eager; contender a compile; liger a ;;
  b) ft b b "${scratch[@]}" "${shape_b[@]}" "${pretok[@]}" data.seq_len=2048 train.micro_batch_size=8
     contender b eager; contender b compile; liger b ;;
  f8t) # (b) with FP8 training (train.fp8, both recipes) beside bf16, against torchao's float8 training + compile
      ft b b "${scratch[@]}" "${shape_b[@]}" "${pretok[@]}" data.seq_len=2048 train.micro_batch_size=8
      for r in ${F8T_RECIPES:-tensorwise rowwise}; do
        ft "b-fp8-$r" b "${scratch[@]}" "${shape_b[@]}" "${pretok[@]}" data.seq_len=2048 train.micro_batch_size=8 \
          train.fp8=$r ${F8T_ARGS:-}
        contender b compile --float8 "$r"
      done
      contender b compile ;;
  f8loss) # issue #33: (b) on real text, 300 steps, bf16 and train.fp8=tensorwise; the loss gap at every logged step
      for r in off tensorwise; do
        loss_curve "f8loss-$r" "${stdlib_b[@]}" train.fp8=$r $([[ $r == tensorwise ]] && echo "${F8LOSS_FP8_ARGS:-}")
      done
      loss_gap "$out/f8loss-off.loss.jsonl" "$out/f8loss-tensorwise.loss.jsonl" "FP8 tensorwise" >"$out/f8loss.md"
      cat "$out/f8loss.md" ;;
  f16loss) # (b) on real text, 300 steps, bf16 autocast against fp16 autocast with dynamic loss scaling
      for p in bf16 fp16; do loss_curve "f16loss-$p" "${stdlib_b[@]}" train.precision=$p; done
      loss_gap "$out/f16loss-bf16.loss.jsonl" "$out/f16loss-fp16.loss.jsonl" "fp16" >"$out/f16loss.md"
      cat "$out/f16loss.md" ;;
  ds) ft ds-a ds "${scratch[@]}" "${shape_a[@]}" "${packed_tiny[@]}" data.seq_len=1024 train.micro_batch_size=32
      ft ds-b ds "${scratch[@]}" "${shape_b[@]}" "${packed_tiny[@]}" data.seq_len=2048 train.micro_batch_size=8 ;;
  a-aten|b-aten)  # finetune with train.fused_kernels=false: what the fused paths add
     ft "$w" "${w%-aten}" "${scratch[@]}" train.fused_kernels=false "${pretok[@]}" \
       $([[ $w == a-aten ]] && echo "${shape_a[*]} data.seq_len=1024 train.micro_batch_size=32" ||
         echo "${shape_b[*]} data.seq_len=2048 train.micro_batch_size=8") ;;
  c) random_model llama3-8b
     ft c c --config configs/llama3-8b-lora.yaml model.path="$work/model-llama3-8b" lora.dropout=0 "${pretok[@]}" \
       data.seq_len=2048 train.micro_batch_size=4 train.grad_accum_steps=1
     contender c eager --model-dir "$work/model-llama3-8b"; contender c compile --model-dir "$work/model-llama3-8b"
     liger c --model-dir "$work/model-llama3-8b"
     # What reading the model's files takes, from the page cache (as both runs read them) and from the disk.
     { /usr/bin/time -f "read from the page cache: %e s" cat "$work"/model-llama3-8b/*.safetensors >/dev/null
       for f in "$work"/model-llama3-8b/*.safetensors; do dd if="$f" of=/dev/null bs=16M iflag=direct 2>&1 | tail -1; done
     } >"$out/read-c.txt" 2>&1 ;;
  q) random_model llama3-8b
     for c in ${Q_COMPUTE:-dtype fp8}; do  # model.nf4_compute: the GEMMs over the NF4 codes in bf16 or in FP8
       ft "q-$c" q --config configs/llama3-8b-lora.yaml model.path="$work/model-llama3-8b" model.quantize=nf4 \
         model.nf4_compute=$c lora.dropout=0 "${pretok[@]}" data.seq_len=2048 train.micro_batch_size=4 \
         train.grad_accum_steps=1
     done
     for mode in ${Q_MODES:-eager compile}; do  # PEFT on transformers' bitsandbytes 4-bit model (importable: see docs)
       [[ ${CONTENDERS:-1} == 0 ]] ||
         python3 bench/compare/contender.py q --model-dir "$work/model-llama3-8b" --mode "$mode" --steps "$steps" \
           >>"$results" 2>"$out/py-q-$mode.log" || tail -3 "$out/py-q-$mode.log"
     done ;;
  qloss) random_model llama3-8b  # q on real text for 200 steps, model.nf4_compute dtype and fp8: the loss gap
     for c in dtype fp8; do
       loss_curve "qloss-$c" --config configs/llama3-8b-lora.yaml model.path="$work/model-llama3-8b" \
         model.quantize=nf4 model.nf4_compute=$c lora.dropout=0 "data.train=[{path: $work/stdlib.jsonl, format: text}]" \
         data.packing=true data.seq_len=2048 train.micro_batch_size=2 train.grad_accum_steps=1 train.max_steps=200 \
         optimizer.lr=2e-4 scheduler.type=cosine scheduler.warmup_steps=20 logging.every_steps=10
     done
     loss_gap "$out/qloss-dtype.loss.jsonl" "$out/qloss-fp8.loss.jsonl" "NF4 + FP8 GEMMs" >"$out/qloss.md"
     cat "$out/qloss.md" ;;
  f8) random_model llama3-8b  # c on an FP8 base beside c itself (bf16 base) and PEFT on bf16 (c's contender)
     ft f8 c --config configs/llama3-8b-lora.yaml model.path="$work/model-llama3-8b" model.quantize=fp8 lora.dropout=0 \
       "${pretok[@]}" data.seq_len=2048 train.micro_batch_size=4 train.grad_accum_steps=1
     ft f8-bf16 c --config configs/llama3-8b-lora.yaml model.path="$work/model-llama3-8b" lora.dropout=0 \
       "${pretok[@]}" data.seq_len=2048 train.micro_batch_size=4 train.grad_accum_steps=1
     contender c compile
     for mode in ${F8_MODES:-eager compile}; do  # PEFT on torchao's float8 base (torchao importable: see docs)
       [[ ${CONTENDERS:-1} == 0 ]] ||
         python3 bench/compare/contender.py f8 --model-dir "$work/model-llama3-8b" --mode "$mode" --steps "$steps" \
           >>"$results" 2>"$out/py-f8-$mode.log" || tail -3 "$out/py-f8-$mode.log"
     done ;;
  dpo) random_model llama3-8b  # configs/llama3-8b-dpo-lora.yaml: 4 pairs of 2 x 1024 tokens per micro-batch
     pairs=("data.train=[{path: $work/pairs.jsonl, format: preference}]" train.grad_accum_steps=1)
     ft dpo dpo --config configs/llama3-8b-dpo-lora.yaml model.path="$work/model-llama3-8b" "${pairs[@]}"
     # The reference log-probs scored once before the first step (its first_step_s holds that pass).
     ft dpo-pre dpo --config configs/llama3-8b-dpo-lora.yaml model.path="$work/model-llama3-8b" "${pairs[@]}" \
       preference.precompute_ref_logps=true
     # Without the reference forward (SimPO), and SFT over the same tokens (8 rows of 1024): what the pairs cost.
     ft dpo-simpo dpo --config configs/llama3-8b-dpo-lora.yaml model.path="$work/model-llama3-8b" "${pairs[@]}" \
       train.objective=simpo preference.beta=2.0
     ft dpo-sft dpo --config configs/llama3-8b-lora.yaml model.path="$work/model-llama3-8b" lora.dropout=0 \
       "${pretok[@]}" data.seq_len=1024 train.micro_batch_size=8 train.grad_accum_steps=1
     for mode in ${DPO_MODES:-eager compile}; do
       [[ ${CONTENDERS:-1} == 0 ]] ||
         python3 bench/compare/contender_dpo.py --model-dir "$work/model-llama3-8b" --pairs "$work/pairs.jsonl" \
           --mode "$mode" --steps "$steps" >>"$results" 2>"$out/py-dpo-$mode.log" || tail -3 "$out/py-dpo-$mode.log"
     done ;;
  moe) rm -rf "$work/model-llama3-8b"  # configs/qwen3-30b-a3b-lora.yaml on Qwen3-30B-A3B's shape, MOE_LAYERS layers
     [[ -d $work/model-moe ]] || python3 bench/make_random_hf_model.py qwen3-30b-a3b "$work/model-moe" \
       --layers "${MOE_LAYERS:-12}" --tokenizer "$tok" >/dev/null
     ft moe moe --config configs/qwen3-30b-a3b-lora.yaml model.path="$work/model-moe" "${pretok[@]}" \
       train.grad_accum_steps=1
     for mode in ${MOE_MODES:-eager compile}; do
       [[ ${CONTENDERS:-1} == 0 ]] ||
         python3 bench/compare/contender.py moe --model-dir "$work/model-moe" --mode "$mode" --steps "$steps" \
           >>"$results" 2>"$out/py-moe-$mode.log" || tail -3 "$out/py-moe-$mode.log"
     done ;;
  moe-nf4) # moe on an NF4 base (attention and experts quantized while the files are read); finetune only: PEFT +
     # bitsandbytes leave transformers 5's fused 3-D experts in bf16, so no contender quantizes them
     [[ -d $work/model-moe ]] || python3 bench/make_random_hf_model.py qwen3-30b-a3b "$work/model-moe" \
       --layers "${MOE_LAYERS:-12}" --tokenizer "$tok" >/dev/null
     ft moe-nf4 moe-nf4 --config configs/qwen3-30b-a3b-lora.yaml model.path="$work/model-moe" model.quantize=nf4 \
       "${pretok[@]}" train.grad_accum_steps=1 ;;
  moe48|moe48-nf4) # configs/qwen3-30b-a3b-lora.yaml on all 48 layers: config.json only, the weights drawn on the GPU
     # (model.random_weights; the 61 GB of files would not fit the disk beside the others), moe48-nf4 on an NF4 base
     # (each weight quantized as it is drawn); finetune only
     [[ -d $work/model-moe48 ]] || python3 bench/make_random_hf_model.py qwen3-30b-a3b "$work/model-moe48" \
       --config-only --tokenizer "$tok" >/dev/null
     quant=(); [[ $w == moe48-nf4 ]] && quant=(model.quantize=nf4)
     ft "$w" "$w" --config configs/qwen3-30b-a3b-lora.yaml model.path="$work/model-moe48" model.random_weights=true \
       "${quant[@]}" "${pretok[@]}" train.grad_accum_steps=1 ;;
  q70) rm -rf "$work/model-llama3-8b"  # the disk holds one of them
     [[ -d $work/model-q70 ]] || python3 bench/make_random_hf_model.py llama3-70b "$work/model-q70" --layers 16 \
       --tokenizer "$tok" >/dev/null
     ft q70 q70 --config configs/llama3-70b-qlora.yaml model.path="$work/model-q70" lora.dropout=0 "${pretok[@]}" \
       train.grad_accum_steps=1
     [[ ${CONTENDERS:-1} == 0 ]] ||
       python3 bench/compare/contender.py q70 --model-dir "$work/model-q70" --steps "$steps" >>"$results" \
         2>"$out/py-q70.log" || tail -3 "$out/py-q70.log" ;;
  f70) rm -rf "$work/model-llama3-8b"  # q70 with an FP8 base beside the NF4 one (finetune only)
     [[ -d $work/model-q70 ]] || python3 bench/make_random_hf_model.py llama3-70b "$work/model-q70" --layers 16 \
       --tokenizer "$tok" >/dev/null
     for q in fp8 nf4; do
       ft "f70-$q" q70 --config configs/llama3-70b-qlora.yaml model.path="$work/model-q70" model.quantize=$q \
         lora.dropout=0 "${pretok[@]}" train.grad_accum_steps=1
     done ;;
  q70-80) # configs/llama3-70b-qlora.yaml on all 80 of Llama-3-70B's layers: config.json only, the weights drawn on
     # the GPU and quantized as they are drawn (model.random_weights); at 2 x 2048 and at 1 x 8,192 with offload
     [[ -d $work/model-q70-80 ]] || python3 bench/make_random_hf_model.py llama3-70b "$work/model-q70-80" \
       --config-only --tokenizer "$tok" >/dev/null
     ft q70-80 q70-80 --config configs/llama3-70b-qlora.yaml model.path="$work/model-q70-80" model.random_weights=true \
       lora.dropout=0 "${pretok[@]}" train.grad_accum_steps=1
     ft q70-80-offload q70-80 --config configs/llama3-70b-qlora.yaml model.path="$work/model-q70-80" \
       model.random_weights=true lora.dropout=0 "${pretok[@]}" train.grad_accum_steps=1 data.seq_len=8192 \
       train.micro_batch_size=1 model.activation_offload=true ;;
  o70) rm -rf "$work/model-llama3-8b"  # q70 at 8,192 tokens per row, the layer inputs on the GPU or offloaded
     [[ -d $work/model-q70 ]] || python3 bench/make_random_hf_model.py llama3-70b "$work/model-q70" --layers 16 \
       --tokenizer "$tok" >/dev/null
     for offload in false true; do
       ft "o70-offload-$offload" q70 --config configs/llama3-70b-qlora.yaml model.path="$work/model-q70" \
         lora.dropout=0 "${pretok[@]}" train.grad_accum_steps=1 data.seq_len=8192 train.micro_batch_size=1 \
         model.activation_offload=$offload
     done ;;
  d) ft d-a d "${scratch[@]}" "${shape_a[@]}" "${packed[@]}" data.seq_len=1024 train.micro_batch_size=32
     ft d-b d "${scratch[@]}" "${shape_b[@]}" "${packed[@]}" data.seq_len=2048 train.micro_batch_size=8 ;;
  ckpt) : >"$out/ckpt.jsonl"
     dd if=/dev/zero of="$work/dd.bin" bs=64M count=128 oflag=direct 2>&1 | tail -1 >"$out/dd.txt"; rm -f "$work/dd.bin"
     for mode in on off; do
       ckpt_stall "ckpt-b-$mode" "$([[ $mode == off ]] && echo 1 || echo 0)" "${scratch[@]}" "${shape_b[@]}" \
         "${pretok[@]}" data.seq_len=2048 train.micro_batch_size=8 checkpoint.async=$mode
     done
     if [[ ${CONTENDERS:-1} != 0 ]]; then
       rm -rf "$work/hf-save"
       python3 bench/compare/contender.py b --save "$work/hf-save" >>"$out/ckpt.jsonl" 2>"$out/py-ckpt.log" ||
         tail -3 "$out/py-ckpt.log"
       rm -rf "$work/hf-save"
     fi
     cat "$out/dd.txt" "$out/ckpt.jsonl" ;;
  ckpt-c) random_model llama3-8b  # the same stall for c (8B LoRA: adapters and their AdamW state), async on
     ckpt_stall ckpt-c-on 0 --config configs/llama3-8b-lora.yaml model.path="$work/model-llama3-8b" lora.dropout=0 \
       "${pretok[@]}" data.seq_len=2048 train.micro_batch_size=4 train.grad_accum_steps=1 checkpoint.async=on
     tail -1 "$out/ckpt.jsonl" ;;
  g2|g3)
     shape=$([[ $w == g2 ]] && echo gemma2-2b || echo gemma3-1b)
     random_model "$shape"
     ft "$w" "$w" --config "configs/$([[ $w == g2 ]] && echo gemma-2-2b || echo gemma-3-1b)-lora.yaml" \
       model.path="$work/model-$shape" lora.dropout=0 model.activation_checkpointing=false data.packing=false \
       "${pretok[@]}" data.seq_len=2048 train.micro_batch_size=4 train.grad_accum_steps=1
     contender "$w" eager; contender "$w" compile ;;
  7b) for shape in ${SHAPES_7B:-llama2-7b mistral-7b qwen2.5-7b}; do
        random_model "$shape"
        ft "$shape-lora" 7b --config "configs/$shape-lora.yaml" model.path="$work/model-$shape" "${pretok[@]}" \
          train.grad_accum_steps=1
        [[ ${KEEP_MODELS:-0} == 1 ]] || rm -rf "$work/model-$shape"
      done ;;
  8b) random_model llama3-8b  # the shipped Llama-3-8B configs as they are (LoRA with dropout; full)
      for cfg in llama3-8b-lora llama3-8b-full; do
        ft "$cfg" 8b --config "configs/$cfg.yaml" model.path="$work/model-llama3-8b" "${pretok[@]}" \
          train.grad_accum_steps=1
      done ;;
  8b-opt) random_model llama3-8b  # llama3-8b-full.yaml with bf16 weights (OPT_VARIANTS, default all three)
      for v in ${OPT_VARIANTS:-pure kahan kahan8}; do
        opt_variant "$v" || exit 2
        ft "llama3-8b-full-$v" 8b-full --config configs/llama3-8b-full.yaml \
          model.path="$work/model-llama3-8b" "${pretok[@]}" train.grad_accum_steps=1 "${opt[@]}"
      done
      # transformers with bf16 weights, gradient checkpointing and bitsandbytes' AdamW8bit
      contender 8b-full eager --model-dir "$work/model-llama3-8b" --optim adamw8bit ;;
  8b-loss) # issue #33: llama3-8b-full.yaml on real text for 200 steps, F32 master weights (the reference) against
      # bf16 weights (OPT_VARIANTS, default kahan8 pure); the gap at every logged step into OUT/8b-loss.md. LOSS_LAYERS
      # of Llama-3-8B's 32 layers (default: all on a GPU of more than 100 GB, else 12: the reference takes 16 bytes
      # per parameter), drawn on the GPU from config.json (model.random_weights; the same seed in every run).
      layers=${LOSS_LAYERS:-$(( $(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1) > 100000 ? 32 : 12 ))}
      model=$work/model-llama3-8b-L$layers
      [[ -d $model ]] || python3 bench/make_random_hf_model.py llama3-8b "$model" --layers "$layers" --config-only \
        --tokenizer "$tok" >/dev/null
      : >"$out/8b-loss.md"
      for v in f32 ${OPT_VARIANTS:-kahan8 pure}; do
        opt_variant "$v" || exit 2
        loss_curve "8b-loss-$v" --config configs/llama3-8b-full.yaml model.path="$model" model.random_weights=true \
          "data.train=[{path: $work/stdlib.jsonl, format: text}]" train.grad_accum_steps=1 train.max_steps=200 \
          scheduler.type=cosine scheduler.warmup_ratio=0.03 optimizer.lr=1e-5 "${opt[@]}"
        [[ $v == f32 ]] && continue
        echo "#### $v against F32 master weights, $layers layers" >>"$out/8b-loss.md"
        loss_gap "$out/8b-loss-f32.loss.jsonl" "$out/8b-loss-$v.loss.jsonl" "$v" "F32 masters" >>"$out/8b-loss.md"
      done
      cat "$out/8b-loss.md" ;;
  8b-f8) random_model llama3-8b  # llama3-8b-full.yaml, bf16 GEMMs against train.fp8: tensorwise
      for fp8 in off tensorwise; do
        ft "llama3-8b-full-${F8B_PRECISION:-bf16-pure}-fp8-$fp8" 8b-full --config configs/llama3-8b-full.yaml \
          model.path="$work/model-llama3-8b" "${pretok[@]}" train.grad_accum_steps=1 \
          train.precision="${F8B_PRECISION:-bf16-pure}" train.fp8=$fp8
      done
      # transformers with bf16 weights and gradient checkpointing (the bf16-pure setup) under torchao's float8
      # training + compile (torchao importable: a carried wheel; its compile takes minutes)
      for r in ${F8B_RECIPES:-tensorwise}; do
        contender 8b-full compile --model-dir "$work/model-llama3-8b" --float8 "$r"
      done ;;
  esac
done
python3 bench/compare/summarize.py "$results" | tee "$out/compare.md"

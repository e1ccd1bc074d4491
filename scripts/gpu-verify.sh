#!/usr/bin/env bash
# gpu-verify.sh OUT STAGE: the GPU checks behind README "Verified on GPUs" and docs/benchmarks.md, run on the offline
# H200 host (see scripts/gpu-host-build.sh). Needs .deps/ (scripts/fetch-debs.sh) and .gpu/tokenizer.model (any
# sentencepiece model, e.g. the demo's). Stages: build | tests | bench | train | ddp | zero | omp | oom | runtime;
# train measures the shapes in $SHAPES (default llama3-8b; e.g. SHAPES="llama2-7b mistral-7b qwen2.5-7b"). Logs go to
# OUT.
set -uo pipefail
out=${1:?usage: gpu-verify.sh OUT STAGE...}
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bin=build-gpu/bin/finetune
launch=()  # a launcher command in front of the binary (torchrun)
work=/tmp/ft-gpu
mkdir -p "$work" "$out"
[[ -d .deps/prefix ]] && eval "$(scripts/deps-prefix.sh .deps .deps/prefix)"

measure() {  # name, then finetune train arguments: prints the last train metrics line
  local name=$1; shift
  local t0=$SECONDS
  ${launch[@]+"${launch[@]}"} "$bin" train "$@" run.output_dir="$work/$name" logging.progress=off >"$out/$name.log" 2>&1 &
  local pid=$!
  # Throughput runs stop with kill -9 once MEASURE_STEPS steps are logged (resume handles that by design), so
  # the final checkpoint of a multi-GB model does not eat the time budget.
  while kill -0 $pid 2>/dev/null; do
    if [[ -n ${MEASURE_STEPS:-} ]] && grep -q "\"step\":${MEASURE_STEPS}," "$work/$name/metrics.jsonl" 2>/dev/null; then
      kill -9 $pid; break
    fi
    sleep 1
  done
  wait $pid
  local rc=$?
  echo "== $name: rc=$rc, $((SECONDS - t0)) s"
  grep '"event":"train"' "$work/$name/metrics.jsonl" | tail -1 | cut -c1-400
  tail -3 "$out/$name.log"
}

for stage in "$@"; do
  case $stage in
  build)
    nvidia-smi -L
    JOBS=16 BUILD_TYPE=Release scripts/gpu-host-build.sh .deps >"$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
    eval "$(scripts/deps-prefix.sh .deps .deps/prefix)"
    "$bin" info | tee "$out/info.txt"
    ;;
  tests)
    ctest --test-dir build-gpu -L gpu --output-on-failure -j4 >"$out/ctest-gpu.log" 2>&1
    tail -15 "$out/ctest-gpu.log"
    ;;
  bench)
    for args in "--batch 1 --seq 2048" "--batch 4 --seq 2048 --checkpointing"; do
      echo "== bench_model $args"; build-gpu/bench/bench_model $args --steps 4 2>&1 | tail -4
    done | tee "$out/bench_model.txt"
    ;;
  train)
    "$bin" data synth --task add --n 50000 --seed 3 --out "$work/add.jsonl" --overwrite >/dev/null
    data="data.train=[{path: $work/add.jsonl, format: prompt_completion}]"
    export MEASURE_STEPS=12
    for shape in ${SHAPES:-llama3-8b}; do
      rm -rf "$work/model"
      python3 bench/make_random_hf_model.py "$shape" "$work/model" --tokenizer .gpu/tokenizer.model
      cfg=configs/${shape}-lora.yaml
      measure "$shape-lora" --config "$cfg" model.path="$work/model" "$data" data.template=plain train.max_steps=100 \
        logging.every_steps=4 checkpoint.every_steps=0 data.cache_dir="$work/cache"
      if [[ $shape == llama3-8b ]]; then
        measure "$shape-full" --config configs/llama3-8b-full.yaml model.path="$work/model" "$data" \
          data.template=plain train.max_steps=100 logging.every_steps=4 checkpoint.every_steps=0 data.cache_dir="$work/cache"
      fi
    done
    ;;
  zero)
    # ZeRO-1 on 2 GPUs: a 7B full fine-tune with fp32 master weights (bf16 autocast) and activation checkpointing,
    # replicated AdamW state against state sharded across the two ranks (peak memory per GPU).
    "$bin" data synth --task add --n 50000 --seed 3 --out "$work/add.jsonl" --overwrite >/dev/null
    rm -rf "$work/model"
    python3 bench/make_random_hf_model.py llama2-7b "$work/model" --tokenizer .gpu/tokenizer.model
    export MEASURE_STEPS=6
    for z in 1 0; do
      measure "zero$z-7b-full" --config configs/llama3-8b-full.yaml model.path="$work/model" \
        "data.train=[{path: $work/add.jsonl, format: prompt_completion}]" data.template=plain train.precision=bf16 \
        train.micro_batch_size=2 train.grad_accum_steps=1 train.max_steps=100 logging.every_steps=2 \
        checkpoint.every_steps=0 data.cache_dir="$work/cache" distributed.zero=$z --nproc-per-node 2
    done
    ;;
  omp)
    # The single-process step is slower than each DDP rank's (docs/benchmarks.md): is it the CPU thread count?
    "$bin" data synth --task add --n 50000 --seed 3 --out "$work/add.jsonl" --overwrite >/dev/null
    for threads in 1 16 default; do
      env_threads=(); [[ $threads != default ]] && env_threads=(env OMP_NUM_THREADS=$threads)
      launch=("${env_threads[@]}")
      measure "omp-$threads" --config configs/demo.yaml "data.train=[{path: $work/add.jsonl}]" "data.eval=[]" \
        eval.exact_match_samples=0 eval.prompts=[] data.seq_len=1024 data.packing=true model.hidden_size=2048 \
        model.intermediate_size=5632 model.num_layers=16 model.num_heads=16 model.num_kv_heads=8 \
        model.max_position_embeddings=1024 train.precision=bf16 tokenizer.path="$root/.gpu/tokenizer.model" \
        tokenizer.train_vocab_size=0 checkpoint.every_steps=0 logging.every_steps=10 scheduler.warmup_steps=5 \
        train.max_steps=30 train.micro_batch_size=8 run.device=cuda:0
      launch=()
    done
    ;;
  ddp)
    "$bin" data synth --task add --n 50000 --seed 3 --out "$work/add.jsonl" --overwrite >/dev/null
    common=(--config configs/demo.yaml "data.train=[{path: $work/add.jsonl}]" "data.eval=[]" eval.exact_match_samples=0
            eval.prompts=[] data.seq_len=1024 data.packing=true model.hidden_size=2048 model.intermediate_size=5632
            model.num_layers=16 model.num_heads=16 model.num_kv_heads=8 model.max_position_embeddings=1024
            train.precision=bf16 tokenizer.path="$root/.gpu/tokenizer.model" tokenizer.train_vocab_size=0
            checkpoint.every_steps=0 logging.every_steps=10 scheduler.warmup_steps=5 optimizer.lr=3e-4)
    measure ddp-1gpu "${common[@]}" train.max_steps=30 train.micro_batch_size=8 run.device=cuda:0
    measure ddp-2gpu "${common[@]}" train.max_steps=30 train.micro_batch_size=8 --nproc-per-node 2
    measure ddp-2gpu-bf16 "${common[@]}" train.max_steps=30 train.micro_batch_size=8 distributed.reduce_dtype=bf16 \
      --nproc-per-node 2
    # The same run under torchrun (static rendezvous) instead of the built-in launcher.
    launch=(python3 -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29533 --no-python)
    measure ddp-2gpu-torchrun "${common[@]}" train.max_steps=30 train.micro_batch_size=8
    launch=()
    # Same global batch: 1 GPU x 16 rows against 2 GPUs x 8 rows; losses should agree within bf16 noise.
    measure eq-1gpu "${common[@]}" train.max_steps=10 train.micro_batch_size=16 logging.every_steps=1 run.device=cuda:0
    measure eq-2gpu "${common[@]}" train.max_steps=10 train.micro_batch_size=8 logging.every_steps=1 --nproc-per-node 2
    python3 - "$work" <<'PY' | tee "$out/ddp-summary.txt"
import json, sys
def events(run):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{run}/metrics.jsonl") if '"event":"train"' in l]
a, b = [e["loss"] for e in events("eq-1gpu")], [e["loss"] for e in events("eq-2gpu")]
print("1 GPU x16:", [round(x, 4) for x in a]); print("2 GPU x8 :", [round(x, 4) for x in b])
print("max relative difference:", max(abs(x - y) / abs(x) for x, y in zip(a, b)))
one = events("ddp-1gpu")[-1]
print(f"1 GPU: {one['tokens_per_s']:.0f} tok/s, step {one['step_time_s'] * 1e3:.1f} ms")
for run in ("ddp-2gpu", "ddp-2gpu-bf16", "ddp-2gpu-torchrun"):
    try:
        e = events(run)[-1]
    except (OSError, IndexError):
        print(run, "no metrics"); continue
    eff = e["tokens_per_s"] / (2 * one["tokens_per_s"])
    exposed = (e["step_time_s"] - one["step_time_s"]) * 1e3
    print(f"{run}: {e['tokens_per_s']:.0f} tok/s, step {e['step_time_s'] * 1e3:.1f} ms, scaling {eff:.1%}, "
          f"all-reduce time not hidden behind backward ~{exposed:.1f} ms/step")
PY
    ;;
  oom)
    # A micro-batch far beyond the GPU: the error names the batch settings and what to change.
    "$bin" train --config configs/demo.yaml run.device=cuda:0 run.output_dir="$work/oom" data.seq_len=4096 \
      data.packing=true train.micro_batch_size=64 eval.every_steps=0 model.max_position_embeddings=4096 model.hidden_size=2048 \
      model.intermediate_size=5632 model.num_layers=16 model.num_heads=16 train.max_steps=2 \
      tokenizer.path="$root/.gpu/tokenizer.model" tokenizer.train_vocab_size=0 logging.progress=off >"$out/oom.log" 2>&1
    echo "oom rc=$?"; grep -v '^\s*$' "$out/oom.log" | tail -6
    ;;
  runtime)
    scripts/assemble-runtime.sh build-gpu "$work/runtime" >"$out/assemble.log" 2>&1 || tail -20 "$out/assemble.log"
    printf 'run: {device: cuda}\n' >/dev/null
    VERIFY_OUT="$work/verify" scripts/verify-runtime-gpu.sh "$work/runtime" configs/demo.yaml train.max_steps=20 \
      eval.every_steps=0 checkpoint.every_steps=0 >"$out/runtime.log" 2>&1
    echo "runtime rc=$?"; tail -8 "$out/runtime.log"
    ;;
  esac
done

#!/usr/bin/env bash
# Fuzzes every parser of outside input (tests/fuzz, docs/fuzzing.md) with libFuzzer, ASan and UBSan.
# Usage: scripts/fuzz.sh [SECONDS [TARGET...]]   SECONDS per target (default 20); targets default to all:
#   jinja tokenizer safetensors config records checkpoint model_config dataset
# Builds the `fuzz` preset (clang), writes each target's seeds into build/fuzz/corpus/TARGET (kept between runs,
# so longer runs start from what earlier ones found), and runs the targets FT_FUZZ_JOBS at a time (default 1).
# A crash, leak, timeout (10 s per input) or out-of-memory (2 GiB) leaves its input in build/fuzz/artifacts/TARGET
# and makes the script exit 1; `build/fuzz/tests/fuzz/fuzz_TARGET FILE` reproduces it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
seconds=${1:-20}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(jinja tokenizer safetensors config records checkpoint model_config dataset)
jobs=${FT_FUZZ_JOBS:-1}

FT_APT_LISTS="third_party/apt-packages.txt third_party/apt-packages-fuzz.txt" ./scripts/build.sh fuzz fuzz_all
bin=build/fuzz/tests/fuzz
work=build/fuzz
export TMPDIR=$root/$work/tmp  # the targets' scratch directories; a crashed run leaves its own behind
rm -rf "$TMPDIR"
mkdir -p "$TMPDIR"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/fuzz/lsan.supp}

run_one() {
  local t=$1 corpus=$work/corpus/$1 artifacts=$work/artifacts/$1 log=$work/logs/$1.log
  mkdir -p "$corpus" "$artifacts" "$work/logs"
  FT_FUZZ_WRITE_SEEDS=$corpus "$bin/fuzz_$t" >"$log" 2>&1 || { echo "fuzz: $t: writing the seeds failed:"; tail -5 "$log"; return 1; }
  local max_len=65536
  [[ $t == jinja ]] && max_len=8192
  if "$bin/fuzz_$t" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1; then
    echo "fuzz: $t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') inputs in ${seconds}s, corpus $(ls "$corpus" | wc -l), no finding"
  else
    echo "fuzz: $t: FINDING (log: $log)"
    grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5
    return 1
  fi
}

failed=0
running=0
for t in "${targets[@]}"; do
  [[ -x $bin/fuzz_$t ]] || { echo "fuzz: no target $t (built: $(ls $bin | grep '^fuzz_' | tr '\n' ' '))" >&2; exit 2; }
  run_one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while ((running > 0)); do
  wait -n || failed=1
  running=$((running - 1))
done
exit $failed

#!/usr/bin/env bash
# check_runtime_dir.sh SOURCE_DIR BUILD_DIR: assembles the runtime file set of BUILD_DIR's finetune with
# scripts/assemble-runtime.sh (the script the Dockerfile runs) and proves it is complete: `finetune info`,
# `finetune config show` (on the shipped configs/) and `finetune plot` (with the fonts it carries) run from it in an
# empty environment with LD_LIBRARY_PATH limited to its lib/, and every library there (the dlopen'd ones too)
# resolves all its dependencies inside lib/ or to what docker/runtime-libs.txt excludes (glibc, the GCC runtime, the
# driver).
set -euo pipefail
src=${1:?usage: check_runtime_dir.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: check_runtime_dir.sh SOURCE_DIR BUILD_DIR}
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rt=$tmp/runtime

"$src/scripts/assemble-runtime.sh" --link "$build" "$rt"
[[ -x $rt/bin/finetune && -d $rt/lib && -f $rt/configs/demo.yaml ]] || fail "layout bin/ lib/ configs/ incomplete"
runpath=$(readelf -d "$rt/bin/finetune" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
[[ $runpath == "\$ORIGIN/../lib" ]] || fail "RUNPATH is '$runpath', not \$ORIGIN/../lib"

mapfile -t excludes < <(sed -n -E 's/^(exclude|driver)[[:space:]]+//p' "$src/docker/runtime-libs.txt" |
  tr -s ' \t' '\n')
# shellcheck disable=SC2053 # the exclude globs are meant to match
excluded() { local g; for g in "${excludes[@]}"; do [[ -n $g && $1 == $g ]] && return 0; done; return 1; }

# Each object's dependencies resolve inside lib/, or are excluded (and then may be absent, like libcuda here).
checked=0
for obj in "$rt/bin/finetune" "$rt"/lib/*; do
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    excluded "$name" && continue
    [[ $path == "$rt/lib/$name" ]] || fail "$(basename "$obj") loads $name from '$path', outside the runtime dir"
  done < <(env -i LD_LIBRARY_PATH="$rt/lib" ldd "$obj")
  checked=$((checked + 1))
done

run() { env -i LD_LIBRARY_PATH="$rt/lib" HOME="$tmp" "$rt/bin/finetune" "$@"; }
info=$(run info) || fail "finetune info failed from the runtime dir"
grep -q '^LibTorch' <<<"$info" || fail "finetune info printed no LibTorch line: $info"
# yaml-cpp at work on the shipped configs/: either the resolved config (exit 0) or a validation report with
# file:line positions (exit 2, while the demo needs features the config checks do not know yet). A crash or a
# loader error is neither.
rc=0
(cd "$tmp" && run config show --config "$rt/configs/demo.yaml") >"$tmp/show.txt" 2>&1 || rc=$?
case $rc in
  0) grep -q 'name: demo' "$tmp/show.txt" || fail "config show did not print the demo config: $(cat "$tmp/show.txt")" ;;
  2) grep -q "$rt/configs/demo.yaml:[0-9]*:[0-9]*" "$tmp/show.txt" || fail "config show exit 2 without positions: $(cat "$tmp/show.txt")" ;;
  *) fail "finetune config show from the runtime dir exited $rc: $(cat "$tmp/show.txt")" ;;
esac
# cairo at work: a chart drawn from the runtime dir with the fonts it carries (a build without cairo has none).
plotted=""
if [[ -f $rt/etc/fonts/fonts.conf ]]; then
  mkdir -p "$tmp/run"
  printf '{"event":"train","step":1,"loss":2.0,"lr":0.001}\n{"event":"train","step":2,"loss":1.5,"lr":0.001}\n' \
    >"$tmp/run/metrics.jsonl"
  env -i LD_LIBRARY_PATH="$rt/lib" HOME="$tmp" FONTCONFIG_FILE="$rt/etc/fonts/fonts.conf" "$rt/bin/finetune" plot \
    "$tmp/run" >"$tmp/plot.txt" 2>&1 || fail "finetune plot failed from the runtime dir: $(cat "$tmp/plot.txt")"
  [[ $(head -c 4 "$tmp/run/plot.png" | tail -c 3) == PNG ]] || fail "finetune plot wrote no PNG: $(cat "$tmp/plot.txt")"
  plotted=", plot drew a PNG"
fi
echo "$info"
echo "runtime dir: $((checked - 1)) libraries and the binary resolve inside it; info ran, config show exit $rc$plotted"

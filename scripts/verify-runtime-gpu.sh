#!/usr/bin/env bash
# verify-runtime-gpu.sh RUNTIME_DIR CONFIG [key=value ...]: on a GPU host, proves that the directory
# scripts/assemble-runtime.sh wrote (the file set of the Docker runtime stage) is all finetune needs: with
# LD_LIBRARY_PATH limited to RUNTIME_DIR/lib and an otherwise empty environment it runs
#   1. finetune info                                   (must list the GPUs)
#   2. a short training on 1 GPU                       (finetune train --config CONFIG run.device=cuda ...)
#   3. the same on 2 GPUs                              (--nproc-per-node 2)
# and, from the loader's own trace (LD_DEBUG=libs), checks that every library the runs loaded, dlopen'd ones
# included (cuDNN engines, NVRTC, NCCL), came from RUNTIME_DIR/lib, the driver or the base system (glibc, GCC
# runtime). CONFIG should be a few steps long; extra key=value overrides go to both trainings.
# Writes its runs and traces under ${VERIFY_OUT:-/tmp/ft-verify-runtime}; exit status 0 when all holds.
set -euo pipefail
rt=$(cd "${1:?usage: verify-runtime-gpu.sh RUNTIME_DIR CONFIG [key=value ...]}" && pwd)
config=$(readlink -f "${2:?usage: verify-runtime-gpu.sh RUNTIME_DIR CONFIG [key=value ...]}")
shift 2
out=${VERIFY_OUT:-/tmp/ft-verify-runtime}
rm -rf "$out" && mkdir -p "$out"
fail() { echo "verify-runtime-gpu: FAIL: $*" >&2; exit 1; }

# The only environment the runs see: the library path, and what a container would also have.
run() {
  local name=$1; shift
  echo "== $name: finetune $*"
  (cd "$out" && env -i PATH=/usr/bin:/bin HOME="$out" LD_LIBRARY_PATH="$rt/lib" NCCL_NVLS_ENABLE=0 \
      ${CUDA_VISIBLE_DEVICES:+CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES} \
      LD_DEBUG=libs LD_DEBUG_OUTPUT="$out/ld.$name" "$rt/bin/finetune" "$@") 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  ((rc == 0)) || fail "$name exited with $rc (log: $out/$name.log)"
}

run info info
grep -Eq 'H200|H100|A100|GPU 0|cuda:0' "$out/info.log" || fail "finetune info lists no GPU"
run train1 train --config "$config" run.device=cuda run.output_dir="$out/run-1gpu" "$@"
run train2 train --config "$config" --nproc-per-node 2 run.device=cuda run.output_dir="$out/run-2gpu" "$@"

# Every object the loader initialised, over all processes (workers included: LD_DEBUG_OUTPUT is per pid).
sed -n 's/.*calling init: //p' "$out"/ld.* | sort -u >"$out/loaded.txt"
outside=$(grep -v -e "^$rt/lib/" "$out/loaded.txt" || true)
# Outside objects that belong to the file set (CUDA libraries, LibTorch, our C++ dependencies) mean it is
# incomplete; the driver's (libcuda, libnvidia-*), glibc's and optional system extras NCCL probes for (libibverbs)
# are expected from the host or the base image.
ours=$(grep -E '/lib(cu[a-z]*|nvrtc|nvJitLink|nvshmem|torch|c10|nccl|caffe2|yaml-cpp|spdlog|fmt|sentencepiece|gomp|protobuf|z)[._-]' \
         <<<"$outside" | grep -Ev '/libcuda\.so|/libcudadebugger\.so' || true)
echo "== loaded objects: $(wc -l <"$out/loaded.txt") ($(grep -c "^$rt/lib/" "$out/loaded.txt") from $rt/lib)"
grep -E 'libcudnn|libnccl|libnvrtc|libcublas' "$out/loaded.txt" | sed 's/^/   /' || true
[[ -z $outside ]] || { echo "== from the host (driver / base system):"; printf '   %s\n' "${outside//$'\n'/$'\n   '}"; }
[[ -z $ours ]] || fail "libraries of the file set were loaded from outside the runtime dir:"$'\n'"$ours"
grep -q "$rt/lib/libnccl" "$out/loaded.txt" || echo "note: NCCL was not loaded (did the 2-GPU run use NCCL?)"
echo "verify-runtime-gpu: OK: info, 1-GPU and 2-GPU training ran from $rt alone (logs in $out)"

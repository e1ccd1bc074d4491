#!/usr/bin/env bash
# gpu-host-build.sh [DEB_DIR]: builds finetune on an offline GPU host (Ubuntu 24.04 with the CUDA toolkit, g++, CMake,
# Ninja and a python3 that has torch with CUDA; no package source). DEB_DIR (default .deps/) holds the .deb files
# that scripts/fetch-debs.sh downloaded on a machine with apt; they are unpacked into a prefix (default .deps/prefix,
# or FT_DEPS_PREFIX_DIR) that CMake is pointed at. LibTorch comes from python3's torch (or FT_PYTHON).
# Environment: BUILD_DIR (build-gpu), BUILD_TYPE (Release), JOBS (16), TARGETS (ninja targets, default all),
# CMAKE_ARGS (extra -D options; FT_WITH_CAIRO is OFF unless pkg-config finds the host's cairo),
# TORCH_CUDA_ARCH_LIST (default: left to torch, which targets the GPUs it sees). Ends by printing `finetune info`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
debs=${1:-$root/.deps}
prefix=${FT_DEPS_PREFIX_DIR:-$debs/prefix}
build=${BUILD_DIR:-$root/build-gpu}
python=${FT_PYTHON:-python3}

"$python" -c 'import torch; print("gpu-host-build: torch", torch.__version__, "CUDA", torch.version.cuda)' || {
  echo "gpu-host-build: $python cannot import torch; set FT_PYTHON to a python with torch" >&2; exit 1; }
for tool in cmake ninja g++; do
  command -v "$tool" >/dev/null || { echo "gpu-host-build: $tool is not on PATH" >&2; exit 1; }
done

env_lines=$(scripts/deps-prefix.sh "$debs" "$prefix")
eval "$env_lines"
# The charts (`finetune plot`, the sweep's summary.png) need cairo, which the .deb folder does not carry
# (scripts/fetch-debs.sh): the host's, if pkg-config finds it; otherwise the build has no plotting.
cairo=ON
if ! "${PKG_CONFIG:-pkg-config}" --exists 'cairo >= 1.16' 2>/dev/null; then
  cairo=OFF
  echo "gpu-host-build: no cairo >= 1.16 for pkg-config: building without plotting (FT_WITH_CAIRO=OFF)" >&2
fi
# shellcheck disable=SC2086 # CMAKE_ARGS is a list of words
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DFT_PYTHON="$(command -v "$python")" -DFT_DEPS_PREFIX="$FT_DEPS_PREFIX" -DFT_WITH_CAIRO="$cairo" ${CMAKE_ARGS:-}
# shellcheck disable=SC2086 # TARGETS is a list of words
ninja -C "$build" -j"${JOBS:-16}" ${TARGETS:-}
"$build/bin/finetune" info
cat <<MSG
gpu-host-build: done. To run the binary or the tests from another shell, first:
$env_lines
MSG

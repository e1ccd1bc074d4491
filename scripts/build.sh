#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds one CMake preset.
# Usage: scripts/build.sh [PRESET [TARGET...]]   (preset default: default, see CMakePresets.json; targets: all)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
preset=${1:-default}
shift || true
targets=()
(($#)) && targets=(--target "$@")
./scripts/setup.sh
jobs=${FT_BUILD_JOBS:-$(nproc)}
# LibTorch's CMake files warn at every configure (CUDA architectures, kineto) about nothing this build uses: the
# configure output is shown only when it fails.
if ! configure_output=$(cmake --preset "$preset" 2>&1); then
  printf '%s\n' "$configure_output" >&2
  exit 1
fi
cmake --build --preset "$preset" -j "$jobs" "${targets[@]}"

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
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs" "${targets[@]}"

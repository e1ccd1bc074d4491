#!/usr/bin/env bash
# The README's test command: installs what is missing, builds with warnings as errors, runs the whole suite.
# Extra arguments go to ctest (e.g. -L unit, -R Config).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
./scripts/build.sh ci
ctest --preset ci "$@"

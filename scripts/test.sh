#!/usr/bin/env bash
# The README's test command: installs what is missing, builds with warnings as errors, runs the whole suite, then
# fuzzes every parser of outside input for FT_FUZZ_SECONDS each (default 20; 0 skips it; scripts/fuzz.sh).
# Extra arguments go to ctest (e.g. -L unit, -R Config).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
./scripts/build.sh ci
# The tests' Python fork servers (tests/support/pyfork.py) would wait 5 minutes for more scripts; none come after this.
trap 'pkill -u "$(id -u)" -f "$root/tests/support/pyfork.py --serve" || true' EXIT
ctest --preset ci "$@"
fuzz_seconds=${FT_FUZZ_SECONDS:-20}
if ((fuzz_seconds > 0)); then
  ./scripts/fuzz.sh "$fuzz_seconds"
fi

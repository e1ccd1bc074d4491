#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs the demo training (configs/demo.yaml):
# a synthetic task, a freshly trained tokenizer and a small LLaMA, on the CPU in a few minutes.
# Extra arguments are config overrides (e.g. train.max_steps=50) or finetune options.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
./scripts/build.sh default finetune
exec ./build/default/bin/finetune train --config configs/demo.yaml "$@"

#!/usr/bin/env bash
# Training tokens/s, dtrain-trainer vs PyTorch eager, and 2-rank DDP (see trainer_vs_pytorch.py).
# Usage: trainer_vs_pytorch.sh [ROUNDS, default 3] [--ddp-only]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-trainer" ] && [ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/trainer_vs_pytorch.py" --trainer "$build/bin/dtrain-trainer" \
  --dtrain "$build/bin/dtrain" --reference "$root/trainer/python/gpt_reference.py" --rounds "${1:-3}" "${@:2}"

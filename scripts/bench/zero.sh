#!/usr/bin/env bash
# ZeRO stages 0-3 of dtrain-trainer on 2 and 4 ranks, and --zero 1 vs PyTorch DDP + ZeroRedundancyOptimizer
# (see zero.py). Usage: zero.sh [ROUNDS, default 2] [extra zero.py flags, e.g. --precisions fp32,bf16,bf16+r16]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-trainer" ] && [ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
rounds=${1:-2}
shift || true
exec /usr/bin/python3 "$root/scripts/bench/zero.py" --trainer "$build/bin/dtrain-trainer" \
  --dtrain "$build/bin/dtrain" --torch-worker "$root/scripts/bench/zero_torch_worker.py" --rounds "$rounds" "$@"

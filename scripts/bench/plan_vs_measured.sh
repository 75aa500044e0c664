#!/usr/bin/env bash
# `dtrain plan`'s predicted step time against dtrain-trainer's measured one on this machine, the plan given the
# machine's measured GEMM rate, allreduce busbw and small-message latencies (see plan_vs_measured.py).
# Usage: plan_vs_measured.sh [ROUNDS, default 4] [BACKEND: shm (default, the trainer's on one node) or gloo]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-trainer" ] && [ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/plan_vs_measured.py" --trainer "$build/bin/dtrain-trainer" \
  --dtrain "$build/bin/dtrain" --rounds "${1:-4}" --backend "${2:-shm}"

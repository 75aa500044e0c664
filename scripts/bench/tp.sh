#!/usr/bin/env bash
# dtrain-trainer --tp 2 against DDP on the same 2 ranks and global batch: pp.py's first two layouts. Usage: tp.sh
# [ROUNDS, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-trainer" ] && [ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/pp.py" --trainer "$build/bin/dtrain-trainer" \
  --dtrain "$build/bin/dtrain" --rounds "${1:-3}" --layouts "DDP, 2 ranks;TP=2"

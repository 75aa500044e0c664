#!/usr/bin/env bash
# dtrain-trainer --tp 2 against DDP on the same 2 ranks and global batch (see tp.py). Usage: tp.sh [ROUNDS, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-trainer" ] && [ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/tp.py" --trainer "$build/bin/dtrain-trainer" \
  --dtrain "$build/bin/dtrain" --rounds "${1:-3}"

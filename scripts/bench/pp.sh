#!/usr/bin/env bash
# dtrain-trainer --pp and --tp against DDP on the same ranks and global batch (see pp.py). Usage: pp.sh [ROUNDS, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-trainer" ] && [ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/pp.py" --trainer "$build/bin/dtrain-trainer" \
  --dtrain "$build/bin/dtrain" --rounds "${1:-3}"

#!/usr/bin/env bash
# dtrain-trainer's 2-rank DDP step, default communicator (auto -> shm) vs gloo (see comm_auto.py).
# Usage: comm_auto.sh [ROUNDS, default 3] [--json FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-trainer" ] && [ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/comm_auto.py" --trainer "$build/bin/dtrain-trainer" \
  --dtrain "$build/bin/dtrain" --rounds "${1:-3}" "${@:2}"

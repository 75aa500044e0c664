#!/usr/bin/env bash
# Launch and teardown, dtrain vs torchrun, side by side (see launch_vs_torchrun.py). Usage: launch_vs_torchrun.sh [RUNS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/launch_vs_torchrun.py" --dtrain "$build/bin/dtrain" --runs "${1:-7}"

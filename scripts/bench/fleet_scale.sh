#!/usr/bin/env bash
# The launcher at scale with simulated agents (see fleet_scale.py). Usage: fleet_scale.sh [--cases ...] [--json F]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain" ] && [ -x "$build/bin/dtrain-fleet-sim" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/fleet_scale.py" --dtrain "$build/bin/dtrain" \
  --sim "$build/bin/dtrain-fleet-sim" "$@"

#!/usr/bin/env bash
# Rendezvous at scale (see rendezvous_scale.py). Usage: rendezvous_scale.sh [AGENT_COUNTS, default 64,256,512]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-store-ping" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/rendezvous_scale.py" --dtrain "$build/bin/dtrain" \
  --ping "$build/bin/dtrain-store-ping" --agents "${1:-64,256,512}"

#!/usr/bin/env bash
# What health.instrument: auto costs a PyTorch script: per wrapped call, configs/ddp_toy.py's steps/s under
# dtrain run, auto vs off, and its loop with the instrumentation switched off and on in blocks inside one run (see
# instrument_cost.py). Usage: instrument_cost.sh [instrument_cost.py options]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/instrument_cost.py" --dtrain "$build/bin/dtrain" "$@"

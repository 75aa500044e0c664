#!/usr/bin/env bash
# `dtrain run` across machines vs torchrun c10d on 2 (or 3) network-namespace hosts: startup and failure teardown,
# side by side (see run_nodes.py; needs root). Usage: run_nodes.sh [--hosts 3] [--pairs N] [--fail-pairs N]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/bench/run_nodes.py" --dtrain "$build/bin/dtrain" "$@"

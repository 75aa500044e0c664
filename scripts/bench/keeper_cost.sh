#!/usr/bin/env bash
# Per-worker cost of containment (agent/supervisor/process/keeper.h): spawn latency and keeper memory for 100 workers, with
# keepers and with a plain fork + exec, for an agent-sized process and for one with 256 MiB of dirty memory; then the
# small case again with the agent's PID namespace (agent/supervisor/process/pid_namespace.h; needs root).
# Usage: keeper_cost.sh [WORKERS, default 100]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-spawn-bench" ] || "$root/scripts/build.sh"
for ballast in 0 256; do
  "$build/bin/dtrain-spawn-bench" --workers "${1:-100}" --ballast-mb "$ballast"
done
"$build/bin/dtrain-spawn-bench" --workers "${1:-100}" --ballast-mb 0 --pid-namespace 1

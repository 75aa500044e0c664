#!/usr/bin/env bash
# `dtrain plan`'s predicted communication time and scaling efficiency against dtrain-trainer on 2 and 4
# network-namespace hosts with tc tbf links (see plan_netns.py). Needs root (namespaces, tc).
# Usage: plan_netns.sh [ROUNDS, default 3] [extra plan_netns.py flags, e.g. --rates 200mbit,1gbit --worlds 2,4]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain-trainer" ] && [ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
rounds=${1:-3}
shift || true
exec /usr/bin/python3 "$root/scripts/bench/plan_netns.py" --trainer "$build/bin/dtrain-trainer" \
  --dtrain "$build/bin/dtrain" --rounds "$rounds" "$@"

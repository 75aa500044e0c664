#!/usr/bin/env bash
# Node 0's agent under a flooded store (tests/tools/store_flood.py run as a job's worker): the agent's RSS before and
# after, and where the store's bounds refused the flood. The attacks of the hardening issue: 100k keys of 4 KiB,
# 10 values of 64 MiB, and 20 values of 16 MiB (the largest a value may be).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
export PYTHONPATH="$build/python:$root/worker/python${PYTHONPATH:+:$PYTHONPATH}"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for attack in "100000 4096" "10 67108864" "20 16777216"; do
  echo "== store_flood.py $attack"
  # shellcheck disable=SC2086
  "$build/bin/dtrain" run -n 1 --console all --logs-dir "$logs" -- /usr/bin/python3 "$root/tests/tools/store_flood.py" $attack \
    2>&1 | grep -E "rss|stored" | sed 's/^\[0\] //' | cut -c1-200
done

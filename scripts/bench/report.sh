#!/usr/bin/env bash
# The report page's cost on a big job: `dtrain report DIR` on a synthetic run directory (report_run.py: 1,024 ranks,
# 10,000 steps of 0.5 s, the launcher's samples windows and its 10 s health events) takes under 2 s and writes a
# page under 5 MB. Prints the event log's size, each run's wall time (best of --runs), and the page's size; exits 1
# when a limit is exceeded.
# Usage: report.sh [RANKS, default 1024] [STEPS, default 10000] [RUNS, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
ranks=${1:-1024} steps=${2:-10000} runs=${3:-3}
dir=$(mktemp -d /tmp/dtrain-report-bench-XXXXXX)
trap 'rm -rf "$dir"' EXIT
python3 "$root/scripts/bench/report_run.py" "$dir" --ranks "$ranks" --steps "$steps"
echo "events.jsonl: $(du -m "$dir/events.jsonl" | cut -f1) MB, $(grep -c '"event":"samples"' "$dir/events.jsonl") samples events"
best=
for _ in $(seq "$runs"); do
  begin=$(date +%s.%N)
  "$build/bin/dtrain" report "$dir" >/dev/null
  took=$(echo "$(date +%s.%N) - $begin" | bc)
  echo "dtrain report: ${took} s"
  if [ -z "$best" ] || [ "$(echo "$took < $best" | bc)" = 1 ]; then best=$took; fi
done
size=$(stat -c %s "$dir/report.html")
echo "best ${best} s, report.html ${size} bytes ($ranks ranks, $steps steps)"
[ "$(echo "$best < 2" | bc)" = 1 ] || { echo "FAIL: over 2 s"; exit 1; }
[ "$size" -lt 5000000 ] || { echo "FAIL: over 5 MB"; exit 1; }

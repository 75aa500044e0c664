#!/usr/bin/env bash
# The shm communicator against gloo, 2 ranks on this node, side by side in one job: each round is one
# `dtrain run -n 2` whose ranks run `dtrain bench allreduce` with --backend gloo, then with --backend shm on
# communicator-allocated and on user buffers, at 1 MiB and 64 MiB. Prints every round's busbw (GB/s) and the
# shm/gloo ratios. Other work on the machine moves the numbers: run several rounds and read the spread.
# Usage: shm.sh [ROUNDS, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DTRAIN_BUILD_DIR:-$root/build}
[ -x "$build/bin/dtrain" ] || "$root/scripts/build.sh"
dtrain=$build/bin/dtrain
rounds=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bench='"$0" bench allreduce -b 1M -e 64M -f 64 -n 20 -w 3'
both="$bench --backend gloo && $bench --backend shm --buffers both"
echo "command per round: dtrain run -n 2 -- sh -c '$both' \$dtrain"
for round in $(seq 1 "$rounds"); do
  (cd "$work" && "$dtrain" run -n 2 --name shm-vs-gloo -- sh -c "$both" "$dtrain") >"$work/round$round.txt"
  # Lines are "[0] ..." on the console; a title names backend and buffers, each row is size ... busbw #wrong.
  awk -v round="$round" '
    { sub(/^\[[0-9]+\] /, "") }
    /^# dtrain bench/ { key = ($0 ~ /backend gloo/) ? "gloo" : ($0 ~ /user/) ? "shm-user" : "shm-comm"; next }
    NF == 6 && $1 ~ /^[0-9]+$/ { busbw[key, $1] = $5; wrong += $6; sizes[$1] = 1 }
    END {
      for (s in sizes) {
        printf "round %s  %6.0f MiB  gloo %7.3f  shm(communicator) %7.3f (%5.1fx)  shm(user) %7.3f (%5.1fx)  #wrong %d\n",
          round, s / 1048576, busbw["gloo", s], busbw["shm-comm", s], busbw["shm-comm", s] / busbw["gloo", s],
          busbw["shm-user", s], busbw["shm-user", s] / busbw["gloo", s], wrong
      }
    }' "$work/round$round.txt" | sort -k3 -n
done
